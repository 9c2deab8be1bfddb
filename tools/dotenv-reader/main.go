// Command dotenv-reader reads .env files the way Docker Compose reads its project .env file:
// compose-go v2's dotenv package, ${VAR} and $VAR looked up in this process's environment
// (then in the file's earlier keys), as Compose's own loader does. The S11.3 dotenv tests
// (tests/support/dotenv_reader.py) check that the operator's files read back exactly with it.
//
//	dotenv-reader FILE...
//
// prints one JSON line per FILE, in order: {"values": {...}} when Compose reads the file, or
// {"error": "..."} when Compose refuses it (a parse or interpolation error is a result, not a
// failure). A file that cannot be read at all exits 1, so a test never takes it for a refusal.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/sirupsen/logrus"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dotenv-reader FILE...")
		os.Exit(2)
	}
	// Compose warns on stderr for every unset variable; the JSON result already shows it.
	logrus.SetOutput(io.Discard)
	environment := map[string]string{}
	for _, pair := range os.Environ() {
		name, value, _ := strings.Cut(pair, "=")
		environment[name] = value
	}
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	for _, path := range os.Args[1:] {
		// Read once up front: a missing or unreadable file is the caller's bug, not a refusal.
		if _, err := os.ReadFile(path); err != nil {
			fmt.Fprintf(os.Stderr, "dotenv-reader: %v\n", err)
			os.Exit(1)
		}
		// The call Compose makes for its project .env file (cli.WithDotEnv).
		values, err := dotenv.GetEnvFromFile(environment, []string{path})
		result := map[string]any{"values": values}
		if err != nil {
			result = map[string]any{"error": err.Error()}
		}
		if err := out.Encode(result); err != nil {
			fmt.Fprintf(os.Stderr, "dotenv-reader: %v\n", err)
			os.Exit(1)
		}
	}
}
