package wire

// ClusterIDHeader is the response header that carries the ID of the
// cluster the answering node belongs to. The server sets it on every
// answer (errors and streams included) once the node knows its cluster;
// clients pin the first ID they see and refuse answers that carry
// another.
const ClusterIDHeader = "Tenure-Cluster-Id"
