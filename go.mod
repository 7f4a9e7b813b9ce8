module github.com/corral-dev/corral

go 1.26.8

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	go.etcd.io/bbolt v1.4.3 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
