package pki

import (
	"crypto/x509"
	"fmt"
	"os"
)

// CAPool is a pool of CA certificates read from PEM files and read again
// when they change (see ReloadInterval): for a listener that verifies
// client certificates, so that a CA added to (or dropped from) a file
// takes effect without a restart. A changed file that holds no PEM
// certificate is refused and the pool in use stays.
type CAPool struct {
	live *watched[x509.CertPool]
}

// LoadCAPools reads the CA certificates of every file in paths into one
// pool. Each file must hold at least one PEM certificate.
func LoadCAPools(paths ...string) (*CAPool, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("pki: ca pool: no file")
	}
	files := append([]string(nil), paths...)
	c := &CAPool{live: &watched[x509.CertPool]{
		files:    files,
		interval: ReloadInterval,
		load: func() (*x509.CertPool, error) {
			pool := x509.NewCertPool()
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					return nil, fmt.Errorf("pki: ca: %w", err)
				}
				if !pool.AppendCertsFromPEM(b) {
					return nil, fmt.Errorf("pki: ca %s: no PEM certificate", f)
				}
			}
			return pool, nil
		},
	}}
	if err := c.live.start(); err != nil {
		return nil, err
	}
	return c, nil
}

// Pool returns the pool in use.
func (c *CAPool) Pool() *x509.CertPool { return c.live.get() }

// Reload re-reads the files now if they changed, and returns why the new
// pool was refused (nil: loaded, or unchanged).
func (c *CAPool) Reload() error { return c.live.reload() }

// OnReloadError sets what hears of a changed file that could not be
// loaded (before the pool is used).
func (c *CAPool) OnReloadError(f func(error)) { c.live.onErr = f }
