package load

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Kind is the shape of a scenario's load.
type Kind string

// The scenario kinds. One op is always one acquire plus one release (plus the
// renews of RenewHeavy), as WLock's benchmark counts.
const (
	// Uncontended: every acquire takes a fresh random key nobody else uses.
	Uncontended Kind = "uncontended"
	// Contended: workers pick one of Keys hot keys at random and wait for
	// it (a blocking acquire), hold it for Hold, release.
	Contended Kind = "contended"
	// RenewHeavy: fresh keys; after each acquire the lease is renewed Renews
	// times before the release.
	RenewHeavy Kind = "renew"
	// ReadWrite: hot keys used as read-write locks; a share ReadFraction of
	// the acquires are reads, the rest writes.
	ReadWrite Kind = "rw"
)

// Kinds lists every scenario kind in report order.
var Kinds = []Kind{Uncontended, Contended, RenewHeavy, ReadWrite}

// Scenario is everything that defines one run's load.
type Scenario struct {
	// Name labels the scenario in the report: the Kind, or "sweep" for the
	// throughput-vs-workers runs (which are Uncontended).
	Name string
	Kind Kind
	// Workers is the number of concurrent workers, each with its own session.
	Workers int
	// Warmup runs before the measured window; nothing in it is counted.
	Warmup time.Duration
	// Duration is the measured window.
	Duration time.Duration
	// TTL of every lock (session TTL for session-based systems).
	TTL time.Duration
	// Hold is how long a worker keeps a lock before releasing it.
	Hold time.Duration
	// Keys is the number of hot keys (Contended, ReadWrite).
	Keys int
	// Renews per op (RenewHeavy).
	Renews int
	// ReadFraction is the share of reads (ReadWrite).
	ReadFraction float64
	// AcquireTimeout bounds one acquire; hitting it counts as a "timeout" error.
	AcquireTimeout time.Duration
	// Seed makes key choices repeatable.
	Seed uint64
}

// Validate reports what is wrong with s, if anything.
func (s Scenario) Validate() error {
	var errs []error
	switch s.Kind {
	case Uncontended, Contended, RenewHeavy, ReadWrite:
	default:
		errs = append(errs, fmt.Errorf("unknown scenario kind %q", s.Kind))
	}
	if s.Workers < 1 {
		errs = append(errs, errors.New("workers must be at least 1"))
	}
	if s.Duration <= 0 {
		errs = append(errs, errors.New("duration must be positive"))
	}
	if s.Warmup < 0 || s.Hold < 0 {
		errs = append(errs, errors.New("warm-up and hold must not be negative"))
	}
	if s.TTL <= 0 || s.AcquireTimeout <= 0 {
		errs = append(errs, errors.New("ttl and acquire timeout must be positive"))
	}
	if s.Hot() && s.Keys < 1 {
		errs = append(errs, errors.New("keys must be at least 1"))
	}
	if s.Kind == RenewHeavy && s.Renews < 1 {
		errs = append(errs, errors.New("renews must be at least 1"))
	}
	if s.Kind == ReadWrite && (s.ReadFraction < 0 || s.ReadFraction > 1) {
		errs = append(errs, errors.New("read fraction must be within [0, 1]"))
	}
	if s.Hold >= s.TTL && s.Hot() {
		errs = append(errs, fmt.Errorf("hold %v must be shorter than ttl %v", s.Hold, s.TTL))
	}
	return errors.Join(errs...)
}

// Hot reports whether the scenario uses a fixed set of shared keys.
func (s Scenario) Hot() bool { return s.Kind == Contended || s.Kind == ReadWrite }

// Supported reports whether a system with caps can run s, and if not, why.
func (s Scenario) Supported(c Caps) (bool, string) {
	switch {
	case s.Kind == RenewHeavy && !c.Renew:
		return false, "no per-lock renew"
	case s.Kind == ReadWrite && !c.ReadWrite:
		return false, "no read-write lock"
	}
	return true, ""
}

// Describe is a one-line description for humans.
func (s Scenario) Describe() string {
	d := fmt.Sprintf("%d workers, %v measured after %v warm-up, TTL %v", s.Workers, s.Duration, s.Warmup, s.TTL)
	switch s.Kind {
	case Uncontended:
		return "fresh random keys; " + d
	case Contended:
		return fmt.Sprintf("%d hot keys, blocking acquire, hold %v, acquire timeout %v; %s", s.Keys, s.Hold, s.AcquireTimeout, d)
	case RenewHeavy:
		return fmt.Sprintf("fresh random keys, %d renews per op; %s", s.Renews, d)
	case ReadWrite:
		return fmt.Sprintf("%d hot read-write keys, %.0f%% reads, hold %v; %s", s.Keys, 100*s.ReadFraction, s.Hold, d)
	}
	return d
}

// scenarioJSON is Scenario as written to results.json.
type scenarioJSON struct {
	Name           string  `json:"name"`
	Kind           Kind    `json:"kind"`
	Workers        int     `json:"workers"`
	Warmup         string  `json:"warmup"`
	Duration       string  `json:"duration"`
	TTL            string  `json:"ttl"`
	Hold           string  `json:"hold"`
	Keys           int     `json:"keys,omitempty"`
	Renews         int     `json:"renews,omitempty"`
	ReadFraction   float64 `json:"read_fraction,omitempty"`
	AcquireTimeout string  `json:"acquire_timeout"`
	Seed           uint64  `json:"seed"`
}

// MarshalJSON writes durations as Go duration strings ("10s").
func (s Scenario) MarshalJSON() ([]byte, error) {
	return json.Marshal(scenarioJSON{
		s.Name, s.Kind, s.Workers, s.Warmup.String(), s.Duration.String(), s.TTL.String(),
		s.Hold.String(), s.Keys, s.Renews, s.ReadFraction, s.AcquireTimeout.String(), s.Seed,
	})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (s *Scenario) UnmarshalJSON(b []byte) error {
	var j scenarioJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = Scenario{Name: j.Name, Kind: j.Kind, Workers: j.Workers, Keys: j.Keys, Renews: j.Renews,
		ReadFraction: j.ReadFraction, Seed: j.Seed}
	for _, d := range []struct {
		dst *time.Duration
		src string
	}{{&s.Warmup, j.Warmup}, {&s.Duration, j.Duration}, {&s.TTL, j.TTL}, {&s.Hold, j.Hold}, {&s.AcquireTimeout, j.AcquireTimeout}} {
		if d.src == "" {
			continue
		}
		v, err := time.ParseDuration(d.src)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", s.Name, err)
		}
		*d.dst = v
	}
	return nil
}
