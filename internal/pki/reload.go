package pki

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ReloadInterval is how often, at most, a Peer or a KeyPair loaded from
// files reads them again: a renewed certificate (paxlockctl certs node ID
// -renew) takes effect within this long of the files changing, at the
// next handshake (or metrics scrape) after it, without a restart. The
// files are compared by content, not by modification time, whose
// granularity could hide a change made in the same tick.
const ReloadInterval = 10 * time.Second

// stamp is what says a file changed: its content's SHA-256 (zero when it
// cannot be read).
type stamp [sha256.Size]byte

// watched holds material loaded from files and loads it again, at most
// once per interval, when one of the files changed. A load that
// fails (a file half written, a key that does not match the new
// certificate) keeps the material in use and is tried again at the next
// interval; onErr hears of it.
type watched[T any] struct {
	files    []string
	load     func() (*T, error)
	interval time.Duration
	onErr    func(error)

	cur    atomic.Pointer[T]
	next   atomic.Int64 // when to look again, Unix ns
	mu     sync.Mutex   // one look at a time
	stamps []stamp
}

func stampsOf(files []string) []stamp {
	out := make([]stamp, len(files))
	for i, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			out[i] = sha256.Sum256(b)
		}
	}
	return out
}

// start loads the material for the first time.
func (w *watched[T]) start() error {
	st := stampsOf(w.files)
	v, err := w.load()
	if err != nil {
		return err
	}
	w.cur.Store(v)
	w.stamps = st
	w.next.Store(time.Now().Add(w.interval).UnixNano())
	return nil
}

// get returns the material, looking at the files first when the interval
// has passed (one caller looks; the others take what is there).
func (w *watched[T]) get() *T {
	if now := time.Now(); now.UnixNano() >= w.next.Load() && w.mu.TryLock() {
		err := w.look(now)
		w.mu.Unlock()
		if err != nil && w.onErr != nil {
			w.onErr(err)
		}
	}
	return w.cur.Load()
}

// look reloads the material if a file changed, and returns why a load
// failed; w.mu is held.
func (w *watched[T]) look(now time.Time) error {
	w.next.Store(now.Add(w.interval).UnixNano())
	st := stampsOf(w.files)
	same := true
	for i := range st {
		same = same && st[i] == w.stamps[i]
	}
	if same {
		return nil
	}
	v, err := w.load()
	if err != nil {
		return err // the stamps stay: tried again next time
	}
	w.cur.Store(v)
	w.stamps = st
	return nil
}

// reload looks at the files now, whatever the interval, and returns the
// load's error (nil when nothing changed).
func (w *watched[T]) reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.look(time.Now())
}

// peerMaterial is a Peer's live certificate and CA pool, and the peer
// listener's configuration built from them.
type peerMaterial struct {
	cert   tls.Certificate
	ca     *x509.CertPool
	server *tls.Config
}

// Current returns the node's certificate and the cluster CA pool in use:
// for a Peer from LoadPeer, re-read from its files when they change (see
// ReloadInterval; a renewed certificate that does not verify against the
// CA or does not name the node is refused, and the one in use stays); for
// a Peer built from values, Cert and CA.
func (p *Peer) Current() (*tls.Certificate, *x509.CertPool) {
	if p.live == nil {
		return &p.Cert, p.CA
	}
	m := p.live.get()
	return &m.cert, m.ca
}

// Reload re-reads a Peer's files now if they changed, and returns why the
// new material was refused (nil: loaded, or unchanged, or a Peer built
// from values).
func (p *Peer) Reload() error {
	if p.live == nil {
		return nil
	}
	return p.live.reload()
}

// OnReloadError sets what hears of a renewed certificate that could not
// be loaded (before the Peer is used).
func (p *Peer) OnReloadError(f func(error)) {
	if p.live != nil {
		p.live.onErr = f
	}
}

// watch makes p reload its material from f.
func (p *Peer) watch(f Files, self uint32) error {
	p.live = &watched[peerMaterial]{
		files:    []string{f.CA, f.Cert, f.Key},
		interval: ReloadInterval,
		load: func() (*peerMaterial, error) {
			ca, cert, err := loadNode(f, p.Cluster, self)
			if err != nil {
				return nil, err
			}
			m := &peerMaterial{cert: cert, ca: ca}
			m.server = p.serverConfig(&m.cert, ca)
			return m, nil
		},
	}
	if err := p.live.start(); err != nil {
		return err
	}
	m := p.live.cur.Load()
	p.CA, p.Cert = m.ca, m.cert
	return nil
}

// KeyPair is a certificate and key read from files and read again when
// they change (see ReloadInterval): for a listener's
// tls.Config.GetCertificate.
type KeyPair struct {
	live *watched[tls.Certificate]
}

// LoadKeyPair reads certFile and keyFile.
func LoadKeyPair(certFile, keyFile string) (*KeyPair, error) {
	k := &KeyPair{live: &watched[tls.Certificate]{
		files:    []string{certFile, keyFile},
		interval: ReloadInterval,
		load: func() (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("pki: %s: %w", certFile, err)
			}
			return &c, nil
		},
	}}
	if err := k.live.start(); err != nil {
		return nil, err
	}
	return k, nil
}

// Certificate returns the certificate in use.
func (k *KeyPair) Certificate() *tls.Certificate { return k.live.get() }

// Reload re-reads the files now if they changed (see Peer.Reload).
func (k *KeyPair) Reload() error { return k.live.reload() }

// OnReloadError sets what hears of a changed pair that could not be
// loaded (before the KeyPair is used).
func (k *KeyPair) OnReloadError(f func(error)) { k.live.onErr = f }

// GetCertificate is for tls.Config.GetCertificate.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.Certificate(), nil
}

// GetCertificate is for tls.Config.GetCertificate: the node's
// certificate in use.
func (p *Peer) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c, _ := p.Current()
	return c, nil
}
