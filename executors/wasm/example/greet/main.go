// Command greet is an example module for the wasm executor: it reads the
// instance's arguments, a JSON array, from stdin, logs a line to stderr
// (the instance's log) and writes its result, a JSON object, to stdout.
//
// Build it (from executors/):
//
//	GOOS=wasip1 GOARCH=wasm go build -o greet.wasm ./wasm/example/greet
//
// then create a definition running it (doc/executors.md):
//
//	jobctl definition create greet --executor wasm --wasm-file greet.wasm
//	jobctl schedule greet '"world"'
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	var args []string
	if err := json.NewDecoder(os.Stdin).Decode(&args); err != nil {
		fmt.Fprintln(os.Stderr, "greet: want a JSON array of names:", err)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "greeting %d names\n", len(args))
	out := map[string]any{"greetings": []string{}}
	for _, a := range args {
		out["greetings"] = append(out["greetings"].([]string), "hello, "+a)
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}
