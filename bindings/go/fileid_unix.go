//go:build unix

package tocsin

import (
	"fmt"
	"os"
	"syscall"
)

// fileID is the device and inode of the file at path (fileKey).
func fileID(path string) (string, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("file %d:%d", uint64(st.Dev), uint64(st.Ino)), true
}
