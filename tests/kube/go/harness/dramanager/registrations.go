package dramanager

import (
	"sort"
	"sync"

	"tokenresource.test/kube/harness/lines"
)

// Registration is one plugin of a driver that the DRA manager's handler accepted.
type Registration struct {
	Driver   string   `json:"driver"`
	Endpoint string   `json:"endpoint"`
	Versions []string `json:"versions"`
}

// Registrations records the plugin manager's calls of the DRA handler, which each release's
// adapter wraps (the handler's methods differ between releases: 1.37 passes a context).
type Registrations struct {
	mutex   sync.Mutex
	current map[string]Registration // by endpoint
}

func newRegistrations() *Registrations {
	return &Registrations{current: map[string]Registration{}}
}

type call struct {
	Call     string   `json:"call"`
	Driver   string   `json:"driver"`
	Endpoint string   `json:"endpoint"`
	Versions []string `json:"versions,omitempty"`
	Error    string   `json:"error,omitempty"`
}

func report(c call, err error) {
	if err != nil {
		c.Error = err.Error()
	}
	lines.Event("registration", c)
}

// Validated: ValidatePlugin answered err.
func (r *Registrations) Validated(driver, endpoint string, versions []string, err error) {
	report(call{Call: "validate", Driver: driver, Endpoint: endpoint, Versions: versions}, err)
}

// Registered: RegisterPlugin answered err.
func (r *Registrations) Registered(driver, endpoint string, versions []string, err error) {
	if err == nil {
		r.mutex.Lock()
		r.current[endpoint] = Registration{Driver: driver, Endpoint: endpoint, Versions: versions}
		r.mutex.Unlock()
	}
	report(call{Call: "register", Driver: driver, Endpoint: endpoint, Versions: versions}, err)
}

// Deregistered: DeRegisterPlugin was called.
func (r *Registrations) Deregistered(driver, endpoint string) {
	r.mutex.Lock()
	delete(r.current, endpoint)
	r.mutex.Unlock()
	report(call{Call: "deregister", Driver: driver, Endpoint: endpoint}, nil)
}

func (r *Registrations) list() []Registration {
	r.mutex.Lock()
	defer r.mutex.Unlock()
	all := make([]Registration, 0, len(r.current))
	for _, registration := range r.current {
		all = append(all, registration)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Endpoint < all[j].Endpoint })
	return all
}

func (r *Registrations) reset() {
	r.mutex.Lock()
	r.current = map[string]Registration{}
	r.mutex.Unlock()
}
