package fsperm

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// NotWritableByOthers refuses a third-party plugin's binary or directory
// that a user other than its owner could change or swap: whoever can run
// code as central's user gets the secrets central gives its plugins, and
// plugins are executed again by path at every restart. It resolves path as
// the kernel does, component by component and through every symbolic link,
// and refuses:
//
//   - the binary (or the directory, for plugins.dir), and the directory
//     holding the binary, when its group or others may write it;
//   - any other directory on the way, from / down, when its group or others
//     may write it, unless it is sticky and owned by root or central's user
//     (as /tmp is): there only an entry's owner may rename or remove it, so
//     the entry the path goes through must be owned by root or central's
//     user too.
//
// Owners are trusted: a directory's owner may chmod it, so a plugin
// directory that a deploy user owns is that user's to change. The error
// names the path and its mode (and owner, where that is what fails).
func NotWritableByOthers(path string) error {
	if !strings.ContainsRune(path, filepath.Separator) {
		// exec looks a bare name up in PATH; check what it would run.
		if found, err := exec.LookPath(path); err == nil {
			path = found
		}
	}
	target, info, parent, err := walkPath(path)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		if err := notGroupOrOtherWritable(parent.path, parent.info); err != nil {
			return err
		}
	}
	return notGroupOrOtherWritable(target, info)
}

// pathEntry is a directory walkPath went through.
type pathEntry struct {
	path string
	info fs.FileInfo
}

// maxLinks bounds the symbolic links walkPath follows, as the kernel's 40.
const maxLinks = 40

// walkPath resolves path as the kernel does, from / (or the working
// directory) down, following symbolic links wherever they are, and checks
// every directory it looks a name up in with checkAncestor. It returns the
// real path of the final file, its information, and the directory holding
// it.
func walkPath(path string) (string, fs.FileInfo, pathEntry, error) {
	if !filepath.IsAbs(path) {
		wd, err := os.Getwd()
		if err != nil {
			return "", nil, pathEntry{}, err
		}
		path = wd + string(filepath.Separator) + path
	}
	rootInfo, err := os.Lstat("/")
	if err != nil {
		return "", nil, pathEntry{}, err
	}
	root := pathEntry{path: "/", info: rootInfo}
	if err := checkAncestor(root.path, root.info); err != nil {
		return "", nil, pathEntry{}, err
	}
	cur := root
	rest := strings.Split(path, "/")
	links := 0
	for {
		// The next component that names something.
		name := ""
		for len(rest) > 0 && name == "" {
			name, rest = rest[0], rest[1:]
			if name == "." {
				name = ""
			}
		}
		if name == "" {
			return "", nil, pathEntry{}, fmt.Errorf("%s: %w", path, fs.ErrInvalid)
		}
		if name == ".." {
			parent := filepath.Dir(cur.path)
			info, err := os.Lstat(parent)
			if err != nil {
				return "", nil, pathEntry{}, err
			}
			cur = pathEntry{path: parent, info: info}
			if !more(rest) {
				return cur.path, cur.info, cur, nil
			}
			continue
		}
		next := filepath.Join(cur.path, name)
		info, err := os.Lstat(next)
		if err != nil {
			return "", nil, pathEntry{}, err
		}
		if err := checkEntry(cur, next, info); err != nil {
			return "", nil, pathEntry{}, err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return "", nil, pathEntry{}, fmt.Errorf("%s: too many symbolic links", path)
			}
			to, err := os.Readlink(next)
			if err != nil {
				return "", nil, pathEntry{}, err
			}
			if filepath.IsAbs(to) {
				cur = root
			}
			rest = append(strings.Split(to, "/"), rest...)
			if !more(rest) {
				// A link to "/" or to "." and the like.
				return cur.path, cur.info, cur, nil
			}
			continue
		}
		if !more(rest) {
			return next, info, cur, nil
		}
		if !info.IsDir() {
			return "", nil, pathEntry{}, fmt.Errorf("%s: not a directory", next)
		}
		if err := checkAncestor(next, info); err != nil {
			return "", nil, pathEntry{}, err
		}
		cur = pathEntry{path: next, info: info}
	}
}

// more reports whether components holds a name still to look up.
func more(components []string) bool {
	return slices.ContainsFunc(components, func(c string) bool { return c != "" && c != "." })
}

// checkAncestor is the rule of a directory above a plugin: not writable by
// its group or others, unless sticky and owned by root or central's user.
func checkAncestor(path string, info fs.FileInfo) error {
	m := info.Mode()
	if m.Perm()&0o022 == 0 {
		return nil
	}
	if m&fs.ModeSticky != 0 {
		if uid, ok := Owner(info); !ok || uid == 0 || uid == os.Geteuid() {
			return nil
		}
		uid, _ := Owner(info)
		return fmt.Errorf("%s has mode %s and belongs to uid %d, neither root nor central's user: it could replace a plugin central runs; refusing it", path, m, uid)
	}
	return writableError(path, m)
}

// checkEntry is the rule of an entry the path goes through in dir: in a
// sticky directory others may write, only root's or central's user's.
func checkEntry(dir pathEntry, path string, info fs.FileInfo) error {
	m := dir.info.Mode()
	if m&fs.ModeSticky == 0 || m.Perm()&0o022 == 0 {
		return nil
	}
	uid, ok := Owner(info)
	if !ok || uid == 0 || uid == os.Geteuid() {
		return nil
	}
	return fmt.Errorf("%s belongs to uid %d, neither root nor central's user, in %s (mode %s), where anyone may create an entry: its owner could replace a plugin central runs; refusing it",
		path, uid, dir.path, m)
}

// notGroupOrOtherWritable is the rule of a plugin binary, of plugins.dir
// and of the directory holding a binary.
func notGroupOrOtherWritable(path string, info fs.FileInfo) error {
	if m := info.Mode(); m.Perm()&0o022 != 0 {
		return writableError(path, m)
	}
	return nil
}

func writableError(path string, m fs.FileMode) error {
	return fmt.Errorf("%s has mode %s: writable by its group or others, who could replace a plugin central runs; refusing it (chmod go-w %s)",
		path, m, path)
}
