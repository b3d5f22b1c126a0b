#!/bin/sh
# Regenerates the Go code for proto/. Needs protoc and, at these versions:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
#   go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.0
set -e
cd "$(dirname "$0")/.."
PATH="$(go env GOPATH)/bin:$PATH"
protoc -I proto \
  --go_out=gen --go_opt=paths=source_relative \
  --connect-go_out=gen --connect-go_opt=paths=source_relative \
  --go-vtproto_out=gen --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size \
  proto/tenure/v1/tenure.proto
