// Command modes misbehaves on request, for the wasm executor's tests:
// its first argument is "ok", "loop", "alloc", "exit3" or "fs".
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

var sink [][]byte

func main() {
	var args []string
	_ = json.NewDecoder(os.Stdin).Decode(&args)
	if len(args) == 0 {
		args = []string{"ok"}
	}
	switch args[0] {
	case "loop":
		for i := 0; ; i++ {
			if i < 0 {
				fmt.Println(i)
			}
		}
	case "alloc":
		for i := 0; i < 1<<20; i++ {
			b := make([]byte, 1<<20)
			b[len(b)-1] = 1
			sink = append(sink, b)
		}
	case "exit3":
		fmt.Fprintln(os.Stderr, "exiting with 3")
		os.Exit(3)
	case "fs":
		b, err := os.ReadFile("/etc/passwd")
		fmt.Fprintf(os.Stderr, "read /etc/passwd: %d bytes, %v\n", len(b), err)
	}
	fmt.Println(`{"mode":"` + args[0] + `"}`)
}
