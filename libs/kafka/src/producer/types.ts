/**
 * A message as {@link messageBytes} counts it: key, value and headers (a header with an array value is one header per
 * element, as kafkajs writes it). A kafkajs `Message` has this shape.
 */
export interface SizedMessage {
  key?: string | Buffer | null;
  value: string | Buffer | null;
  headers?: Record<string, string | Buffer | null | Array<string | Buffer | null> | undefined>;
}
