package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionLine is what `edge --version` prints: the main module's version
// and the VCS stamp of the build (runtime/debug.ReadBuildInfo), e.g.
//
//	edge v0.0.0-20261201093000-4cb6b26d1e2f, revision 4cb6b26d1e2f…, 2026-12-01T09:30:00Z, go1.26.8 linux/amd64
//
// without a stamp "revision unknown", from a modified tree "modified".
func versionLine(bi *debug.BuildInfo, ok bool) string {
	version, revision, when, modified := "unknown", "unknown", "", false
	goVersion := runtime.Version()
	if ok && bi != nil {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	parts := []string{"edge " + version, "revision " + revision}
	if when != "" {
		parts = append(parts, when)
	}
	if modified {
		parts = append(parts, "modified")
	}
	parts = append(parts, goVersion+" "+runtime.GOOS+"/"+runtime.GOARCH)
	return strings.Join(parts, ", ")
}

// printVersion is `edge --version`.
func printVersion(w io.Writer) int {
	bi, ok := debug.ReadBuildInfo()
	fmt.Fprintln(w, versionLine(bi, ok))
	return 0
}

// isVersionArg reports whether arg asks for the version (the flag package
// accepts one or two dashes; `edge version` as a command too).
func isVersionArg(arg string) bool {
	return arg == "--version" || arg == "-version" || arg == "version"
}
