// Package lines is how the tests talk to a program that embeds a real Kubernetes component:
// one JSON object a line. The test writes requests on the program's standard input,
// {"id": 1, "op": "allocatable", "args": {...}}, and reads on its standard output the answer,
// {"id": 1, "result": ...} or {"id": 1, "error": "..."}, and events the program reports on its
// own, {"event": "name", "data": ...}. Logs go to standard error.
package lines

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
)

// Handler answers one operation; its result is encoded as JSON.
type Handler func(args json.RawMessage) (any, error)

type request struct {
	ID   int64           `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args"`
}

type answer struct {
	ID     int64  `json:"id"`
	Result any    `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

type event struct {
	Event string `json:"event"`
	Data  any    `json:"data,omitempty"`
}

var (
	outputMutex sync.Mutex
	output      = json.NewEncoder(os.Stdout)
)

func write(value any) {
	outputMutex.Lock()
	defer outputMutex.Unlock()
	if err := output.Encode(value); err != nil {
		fmt.Fprintf(os.Stderr, "lines: cannot write: %v\n", err)
		os.Exit(1)
	}
}

// Event reports something that happened without being asked.
func Event(name string, data any) {
	write(event{Event: name, Data: data})
}

// Decode reads an operation's arguments into target; an absent object leaves it as it is.
func Decode(args json.RawMessage, target any) error {
	if len(args) == 0 || string(args) == "null" {
		return nil
	}
	return json.Unmarshal(args, target)
}

// Serve answers requests one at a time, in order, until standard input closes; then it returns.
// An unknown operation gets an error answer.
func Serve(handlers map[string]Handler) error {
	reader := bufio.NewReaderSize(os.Stdin, 1<<20)
	for {
		line, err := reader.ReadBytes('\n')
		if len(line) > 0 {
			var req request
			if jsonErr := json.Unmarshal(line, &req); jsonErr != nil {
				write(answer{ID: -1, Error: fmt.Sprintf("bad request %q: %v", line, jsonErr)})
			} else if handler, ok := handlers[req.Op]; !ok {
				write(answer{ID: req.ID, Error: fmt.Sprintf("unknown op %q", req.Op)})
			} else if result, opErr := handler(req.Args); opErr != nil {
				write(answer{ID: req.ID, Error: opErr.Error()})
			} else {
				write(answer{ID: req.ID, Result: result})
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
