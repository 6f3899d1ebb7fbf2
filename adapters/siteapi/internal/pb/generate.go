// Package pb holds the protobuf messages and gRPC service of the site API
// (outbox.site.v1), and their conversions to and from the types of package
// ports. Only adapters/siteapi and adapters/siteapi/notify import it; it is
// internal so that nothing else depends on the wire form.
package pb

// Regenerate after editing site.proto (needs protoc, protoc-gen-go and
// protoc-gen-go-grpc on PATH):
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative site.proto
