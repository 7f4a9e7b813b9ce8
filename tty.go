package corral

import "os"

// stdio is the root's descriptors 0, 1, 2 and ExtraFiles: the output
// pipes, or the Terminal in their place. The pipes are still made and
// relayed when a Terminal is set: nothing writes to them, so the relay
// sees end-of-file as soon as the root has started, and the Tree's drain
// and accounting work unchanged.
func (c *Cmd) stdio(stdin, outW, errW *os.File) []*os.File {
	files := append([]*os.File{stdin, outW, errW}, c.ExtraFiles...)
	if c.Terminal != nil {
		files[1], files[2] = c.Terminal, c.Terminal
	}
	return files
}
