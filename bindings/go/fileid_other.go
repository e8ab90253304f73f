//go:build !unix

package tocsin

// fileID: no device and inode here; fileKey uses the resolved absolute path.
func fileID(string) (string, bool) { return "", false }
