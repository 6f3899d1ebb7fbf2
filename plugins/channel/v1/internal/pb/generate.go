// Package pb holds the protobuf messages and gRPC service of the channel
// plugin contract, version 1. Only the gRPC glue of package channel imports
// it; it is internal so that no integrator ever depends on it.
package pb

// Regenerate after editing channel.proto (needs protoc, protoc-gen-go and
// protoc-gen-go-grpc on PATH, of the versions the generated files name:
// Debian's protobuf-compiler package, and go install
// google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12 and
// google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2):
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative channel.proto
