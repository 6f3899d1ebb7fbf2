// Package pb holds the protobuf messages and gRPC service of the channel
// plugin contract, version 1. Only the gRPC glue of package channel imports
// it; it is internal so that no integrator ever depends on it.
package pb

// Regenerate after editing channel.proto (needs protoc, protoc-gen-go and
// protoc-gen-go-grpc on PATH):
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative channel.proto
