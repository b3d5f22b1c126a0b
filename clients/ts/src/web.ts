// The browser entry point: createClient with the fetch-based transports of
// @connectrpc/connect-web. It works wherever fetch and streaming response
// bodies do: browsers, Deno, Bun, and Node.js too.
import type { Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { Client, type ClientConfig } from "./client.js";

export * from "./core.js";

/** Protocol is the wire protocol: "connect" (the default) or "grpc-web".
 * Browsers cannot speak plain gRPC. */
export type Protocol = "connect" | "grpc-web";

/** WebClientConfig is ClientConfig without the transport, which
 * createClient makes for protocol; pass transport to supply your own. */
export interface WebClientConfig extends Omit<ClientConfig, "transport" | "onClose"> {
  protocol?: Protocol;
  transport?: (baseUrl: string) => Transport;
}

/** createClient returns a Client for cfg over fetch. */
export function createClient(cfg: WebClientConfig): Client {
  const protocol = cfg.protocol ?? "connect";
  const transport =
    cfg.transport ??
    ((baseUrl: string): Transport =>
      protocol === "grpc-web" ? createGrpcWebTransport({ baseUrl }) : createConnectTransport({ baseUrl }));
  return new Client({ ...cfg, transport });
}
