package record

// syncDir is a no-op on Windows: directories cannot be opened for sync, and
// NTFS journals the rename itself.
func syncDir(dir string) error { return nil }
