// Package pb holds the protobuf messages and gRPC service of the site→central
// link, version 1. Only package sitelink imports it; it is internal so that
// nothing else depends on the wire form.
package pb

// Regenerate after editing link.proto (needs protoc, protoc-gen-go and
// protoc-gen-go-grpc on PATH):
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative link.proto
