// Cluster identity: every member of a cluster sends the cluster's ID with
// every answer, in the Tenure-Cluster-Id header. The client pins one ID
// and refuses answers that carry another (client.ts).

import { ConnectError, type Transport } from "@connectrpc/connect";

/** clusterIdHeader is the response header with the answering node's
 * cluster ID. */
export const clusterIdHeader = "tenure-cluster-id";

/**
 * withClusterCheck returns t with check called on the response header of
 * every answer, errors included, before the caller sees it; check throws
 * to refuse the answer. A stream is checked when its header arrives.
 */
export function withClusterCheck(t: Transport, check: (h: Headers | undefined) => void): Transport {
  const checkError = (err: unknown): never => {
    if (err instanceof ConnectError) check(err.metadata);
    throw err;
  };
  return {
    async unary(...args) {
      const res = await t.unary(...args).catch(checkError);
      check(res.header);
      return res;
    },
    async stream(...args) {
      const res = await t.stream(...args).catch(checkError);
      check(res.header);
      return res;
    },
  };
}
