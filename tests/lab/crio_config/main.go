// crio-config prints CRI-O's effective configuration (TOML, as `crio config` does) after loading a main file
// and a drop-in directory with CRI-O's own code (github.com/cri-o/cri-o/pkg/config), in the order
// internal/criocli.mergeConfig uses: the main file (skipped when missing), then every file under the
// drop-in directory in lexical order, later files winning.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/cri-o/cri-o/pkg/config"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: crio-config MAIN_FILE DROP_IN_DIR")
		os.Exit(2)
	}
	ctx := context.Background()
	c, err := config.DefaultConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "default config:", err)
		os.Exit(1)
	}
	if err := c.UpdateFromFile(ctx, os.Args[1]); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(os.Stderr, "main file:", err)
		os.Exit(1)
	}
	if err := c.UpdateFromPath(ctx, os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "drop-in directory:", err)
		os.Exit(1)
	}
	out, err := c.ToString()
	if err != nil {
		fmt.Fprintln(os.Stderr, "encode:", err)
		os.Exit(1)
	}
	fmt.Print(out)
}
