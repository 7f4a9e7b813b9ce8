//go:build !linux && !darwin

package term

import "os"

type state struct{}

func openPTY(int, int) (*os.File, *os.File, error) { return nil, nil, ErrUnsupported }
func setSize(*os.File, int, int) error             { return ErrUnsupported }
func size(*os.File) (int, int, error)              { return 0, 0, ErrUnsupported }
func isTerminal(*os.File) bool                     { return false }
func makeRaw(*os.File) (state, error)              { return state{}, ErrUnsupported }
func restore(*os.File, state) error                { return ErrUnsupported }
func setControlling(*os.File) error                { return ErrUnsupported }
func setForeground(*os.File, int) error            { return ErrUnsupported }
func foreground(*os.File) (int, error)             { return 0, ErrUnsupported }

func cancelable(*os.File) (*os.File, func(), error) { return nil, nil, ErrUnsupported }
