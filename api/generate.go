// Package api holds the corral daemon's protocol definitions; the Go code
// generated from them is in corralv1 (committed).
package api

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative corralv1/corral.proto
