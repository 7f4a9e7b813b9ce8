module github.com/corral-dev/corral

go 1.26.8

require (
	github.com/creack/pty v1.1.24
	github.com/google/jsonschema-go v0.4.3
	github.com/modelcontextprotocol/go-sdk v1.8.0
	github.com/prometheus/client_model v0.6.2
	github.com/prometheus/common v0.66.1
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.9
	go.etcd.io/bbolt v1.4.3
	golang.org/x/net v0.60.0
	golang.org/x/sys v0.50.0
	golang.org/x/text v0.42.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/kr/pretty v0.3.1 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/segmentio/asm v1.1.3 // indirect
	github.com/segmentio/encoding v0.5.4 // indirect
	github.com/yosida95/uritemplate/v3 v3.0.2 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/oauth2 v0.36.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/time v0.15.0 // indirect
	google.golang.org/protobuf v1.36.8 // indirect
)
