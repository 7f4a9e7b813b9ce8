//go:build !unix

package client

import "syscall"

func detached() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// lockSpawn has nothing to serialise where no daemon can run.
func lockSpawn(dir string) (unlock func(), err error) { return func() {}, nil }
