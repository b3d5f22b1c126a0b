package wire

// BatchStreamProcedure is the path of BatchStream, a bidirectional
// stream of Batch calls (Connect protocol, HTTP/2) that tenure's Go
// client sends its batches on. Each request message is a BatchRequest,
// served as a Batch call and answered by one BatchResponse, in order;
// the error of a Batch call ends the stream with that error. One stream
// serves batch after batch, so a client's batches, waiting acquires and
// watches share one connection without a new HTTP/2 stream per batch.
// It is not in the service's descriptor: other clients call Batch.
const BatchStreamProcedure = "/tenure.v1.LeaseService/BatchStream"
