// The Node.js entry point: createClient with the transports of
// @connectrpc/connect-node (HTTP/2 without TLS for gRPC and Connect,
// HTTP/1.1 for gRPC-Web).
import type { Transport } from "@connectrpc/connect";
import { Http2SessionManager, createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { hostname } from "node:os";
import { Client, type ClientConfig } from "./client.js";
import { setHostName } from "./session.js";

export * from "./core.js";

setHostName(hostname());

/** Protocol is the wire protocol: "grpc" (the default in Node.js, as in the
 * Go client), "connect", or "grpc-web". */
export type Protocol = "grpc" | "connect" | "grpc-web";

/** NodeClientConfig is ClientConfig without the transport, which
 * createClient makes for protocol; pass transport to supply your own. */
export interface NodeClientConfig extends Omit<ClientConfig, "transport" | "onClose"> {
  protocol?: Protocol;
  transport?: (baseUrl: string) => Transport;
}

/** Idle HTTP/2 connections are pinged so that a dead or paused server is
 * noticed even by a quiet watch. */
const ping = { pingIntervalMs: 10_000, pingTimeoutMs: 5_000 };

/** createClient returns a Client for cfg that talks to each endpoint over
 * its own connection. Close it with client.close(). */
export function createClient(cfg: NodeClientConfig): Client {
  const managers: Http2SessionManager[] = [];
  const protocol = cfg.protocol ?? "grpc";
  const transport =
    cfg.transport ??
    ((baseUrl: string): Transport => {
      if (protocol === "grpc-web") return createGrpcWebTransport({ baseUrl, httpVersion: "1.1" });
      const sessionManager = new Http2SessionManager(baseUrl, ping);
      managers.push(sessionManager);
      const opts = { baseUrl, httpVersion: "2" as const, sessionManager };
      return protocol === "grpc" ? createGrpcTransport(opts) : createConnectTransport(opts);
    });
  return new Client({ ...cfg, transport, onClose: () => managers.forEach((m) => m.abort()) });
}
