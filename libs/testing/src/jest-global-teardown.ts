/** Stops the containers the global setup started, if any; the local stack is left to `infra/local/stack.sh down`. */
export default async function globalTeardown(): Promise<void> {
  await globalThis.__KEYFLOW_CONTAINERS__?.stop();
}
