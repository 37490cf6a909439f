import { createServer, connect, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy in front of the real registry, so a test can take the registry away (stop: connections refused) and
 * bring it back on the same port (start(port)). `url()` is the registry URL through the proxy.
 */
export class RegistryProxy {
  private server?: Server;
  private sockets = new Set<Socket>();
  port = 0;
  constructor(private readonly target: URL) {}
  async start(port = 0): Promise<void> {
    this.server = createServer((client) => {
      const upstream = connect(Number(this.target.port), this.target.hostname);
      [client, upstream].forEach((s) => this.sockets.add(s));
      client.pipe(upstream).pipe(client);
      const close = () => [client, upstream].forEach((s) => s.destroy());
      client.on('error', close);
      upstream.on('error', close);
    });
    await new Promise<void>((r) => this.server!.listen(port, '127.0.0.1', r));
    this.port = (this.server.address() as { port: number }).port;
  }
  url(): string {
    return `http://127.0.0.1:${this.port}${this.target.pathname}`;
  }
  async stop(): Promise<void> {
    this.sockets.forEach((s) => s.destroy());
    await new Promise<void>((r) => this.server!.close(() => r()));
  }
}
