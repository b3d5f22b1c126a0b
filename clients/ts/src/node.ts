// The Node.js entry point: createClient with the transports of
// @connectrpc/connect-node (HTTP/2 for gRPC and Connect, HTTP/1.1 for
// gRPC-Web; TLS to https endpoints).
import type { Transport } from "@connectrpc/connect";
import { Http2SessionManager, createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { hostname } from "node:os";
import type { SecureContextOptions } from "node:tls";
import { Client, type ClientConfig } from "./client.js";
import { TenureError } from "./errors.js";
import { setHostName } from "./session.js";

export * from "./core.js";

setHostName(hostname());

/** Protocol is the wire protocol: "grpc" (the default in Node.js, as in the
 * Go client), "connect", or "grpc-web". */
export type Protocol = "grpc" | "connect" | "grpc-web";

/** TLSOptions verify the servers and may present a client certificate.
 * Certificates and keys are PEM, as tenure certs init writes them: pass
 * the contents (readFileSync(path)), not paths. */
export interface TLSOptions {
  /** The CA (or CAs) that signed the members' certificates (certs/ca.crt);
   * unset: the system's roots. */
  ca?: string | Uint8Array | Array<string | Uint8Array>;
  /** A client certificate (CN = the principal), for tenured --client-ca. */
  cert?: string | Uint8Array;
  /** Its private key. */
  key?: string | Uint8Array;
  /** The name to verify the server certificates against; default each
   * endpoint's host. */
  servername?: string;
}

/** NodeClientConfig is ClientConfig without the transport, which
 * createClient makes for protocol; pass transport to supply your own. */
export interface NodeClientConfig extends Omit<ClientConfig, "transport" | "onClose"> {
  protocol?: Protocol;
  transport?: (baseUrl: string) => Transport;
  /** TLS for every endpoint (it makes every endpoint https, as in the Go
   * client's Config.TLS). Endpoints written https://host:port use TLS
   * even without it, with the system's roots. */
  tls?: TLSOptions;
}

/** secureOptions returns the options of node:tls for tls. */
function secureOptions(tls: TLSOptions | undefined, baseUrl: string): SecureContextOptions & { servername?: string } | undefined {
  if (!baseUrl.startsWith("https://") || tls === undefined) return undefined;
  if ((tls.cert === undefined) !== (tls.key === undefined)) {
    throw new TenureError("client: tls.cert and tls.key go together");
  }
  const o: SecureContextOptions & { servername?: string } = {};
  const pem = (v: string | Uint8Array): string | Buffer => (typeof v === "string" ? v : Buffer.from(v));
  if (tls.ca !== undefined) o.ca = Array.isArray(tls.ca) ? tls.ca.map(pem) : pem(tls.ca);
  if (tls.cert !== undefined) o.cert = pem(tls.cert);
  if (tls.key !== undefined) o.key = pem(tls.key);
  if (tls.servername !== undefined) o.servername = tls.servername;
  return o;
}

/** Idle HTTP/2 connections are pinged so that a dead or paused server is
 * noticed even by a quiet watch. */
const ping = { pingIntervalMs: 10_000, pingTimeoutMs: 5_000 };

/** createClient returns a Client for cfg that talks to each endpoint over
 * its own connection. Close it with client.close(). */
export function createClient(cfg: NodeClientConfig): Client {
  const managers: Http2SessionManager[] = [];
  const protocol = cfg.protocol ?? "grpc";
  const { tls, ...rest } = cfg;
  if (tls !== undefined) secureOptions(tls, "https://"); // checks tls before any connection
  const transport =
    cfg.transport ??
    ((baseUrl: string): Transport => {
      const secure = secureOptions(tls, baseUrl);
      if (protocol === "grpc-web") {
        return createGrpcWebTransport({ baseUrl, httpVersion: "1.1", ...(secure ? { nodeOptions: secure } : {}) });
      }
      const sessionManager = new Http2SessionManager(baseUrl, ping, secure);
      managers.push(sessionManager);
      const opts = { baseUrl, httpVersion: "2" as const, sessionManager };
      return protocol === "grpc" ? createGrpcTransport(opts) : createConnectTransport(opts);
    });
  return new Client({ ...rest, https: cfg.https || tls !== undefined, transport, onClose: () => managers.forEach((m) => m.abort()) });
}
