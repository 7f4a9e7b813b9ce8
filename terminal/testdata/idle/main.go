// Command idle is an idle Go program: the baseline of the holder's memory
// benchmark (what any Go process costs here).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM)
	os.Stdout.WriteString("ready\n")
	os.Stdout.Close()
	<-c
}
