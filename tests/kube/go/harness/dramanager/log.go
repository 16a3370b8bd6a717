package dramanager

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"tokenresource.test/kube/harness/lines"
)

// verbosity is the deepest level written: the registration and health-stream messages the
// tests wait for are at levels 2 to 4 of the real managers.
const verbosity = 4

// reported are the real managers' log messages the tests wait for, as events of these names
// (data: the message's key/value pairs as strings). Every error-level message is reported too,
// as "error-log", so a test sees a failed health stream however the release words it.
var reported = map[string]string{
	"Registered DRA plugin":                                 "plugin-registered",
	"Starting WatchResources stream":                        "health-stream-dialing",
	"Successfully started WatchResources health stream":     "health-stream-started",
	"WatchResources health stream has ended":                "health-stream-ended",
	"Failed to establish WatchResources stream, will retry": "health-stream-failed",
	"Done calling NodePrepareResources rpc":                 "prepare-rpc",
	"Done calling NodeUnprepareResources rpc":               "unprepare-rpc",
	"Deleted ResourceSlices":                                "slices-deleted",
	"Sending health update notification for pods":           "health-update-sent",
}

var writeMutex sync.Mutex

// sink is a logr.LogSink writing klog-like text to standard error and reporting the messages
// above as events: the managers log through klog's contextual logger, which is this one.
type sink struct {
	name   string
	values []any
}

func newLogger() logr.Logger { return logr.New(&sink{}) }

func (s *sink) Init(logr.RuntimeInfo)  {}
func (s *sink) Enabled(level int) bool { return level <= verbosity }
func (s *sink) Info(level int, msg string, kv ...any) {
	s.write("I", msg, nil, kv)
	if name, ok := reported[msg]; ok {
		lines.Event(name, s.data(msg, nil, kv))
	}
}

func (s *sink) Error(err error, msg string, kv ...any) {
	s.write("E", msg, err, kv)
	lines.Event("error-log", s.data(msg, err, kv))
}

func (s *sink) WithValues(kv ...any) logr.LogSink {
	return &sink{name: s.name, values: append(append([]any{}, s.values...), kv...)}
}

func (s *sink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return &sink{name: name, values: s.values}
}

func (s *sink) data(msg string, err error, kv []any) map[string]string {
	data := map[string]string{"msg": msg, "logger": s.name}
	all := append(append([]any{}, s.values...), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		data[fmt.Sprint(all[i])] = text(all[i+1])
	}
	if err != nil {
		data["err"] = err.Error()
	}
	return data
}

func (s *sink) write(severity, msg string, err error, kv []any) {
	data := s.data(msg, err, kv)
	keys := make([]string, 0, len(data))
	for key := range data {
		if key != "msg" && key != "logger" {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	var line strings.Builder
	fmt.Fprintf(&line, "%s%s %s] %q", severity, time.Now().Format("0102 15:04:05.000000"), s.name, msg)
	for _, key := range keys {
		fmt.Fprintf(&line, " %s=%q", key, data[key])
	}
	writeMutex.Lock()
	defer writeMutex.Unlock()
	fmt.Fprintln(os.Stderr, line.String())
}

func text(value any) string {
	switch v := value.(type) {
	case string:
		return v
	default:
		// fmt, not v.Error() or v.String(): it survives a typed nil.
		return fmt.Sprintf("%v", v)
	}
}
