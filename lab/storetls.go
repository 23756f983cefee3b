package lab

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchyard/switchyard/control/store"
	"github.com/switchyard/switchyard/internal/etcdauth"
	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/internal/pki"
)

// The lab's store is secured as a production fleet's should be: the members serve clients over
// TLS and want a client certificate (--client-cert-auth), and etcd's auth is on with one user
// for the balancers (StoreUser, by its certificate's CN) whose role reads and writes the lab's
// prefix only. Certificates come from a CA made for the lab, under StateDir/etcd-pki (removed by
// `lab down`); peers talk plain HTTP inside the store namespace. With --store-passwords the users
// (root's too) authenticate by a password kept in a file there instead, and the members want no
// client certificate.
const (
	// StoreUser is the etcd user of the lab's balancers (their certificate's CN).
	StoreUser = "switchyard-lb"
	pkiLife   = 365 * 24 * time.Hour
)

// storePKI is where the lab keeps the store's CA, the members' and the clients' certificates.
func storePKI(prefix string) string { return filepath.Join(StateDir(prefix), "etcd-pki") }

// storeFiles are the paths of the store's certificates and passwords (written by writeStorePKI).
type storeFiles struct{ dir, ca, lbCert, lbKey, rootCert, rootKey, lbPassword, rootPassword string }

func storeFilesOf(prefix string) storeFiles {
	d := storePKI(prefix)
	return storeFiles{dir: d, ca: filepath.Join(d, "ca.pem"), lbCert: filepath.Join(d, StoreUser+".pem"), lbKey: filepath.Join(d, StoreUser+"-key.pem"),
		rootCert: filepath.Join(d, "root.pem"), rootKey: filepath.Join(d, "root-key.pem"),
		lbPassword: filepath.Join(d, StoreUser+".password"), rootPassword: filepath.Join(d, "root.password")}
}

// memberTLSArgs are a member's server flags for TLS, with client certificates unless users
// authenticate by password.
func memberTLSArgs(f storeFiles, member string, passwords bool) []string {
	args := []string{"--cert-file", filepath.Join(f.dir, member+".pem"), "--key-file", filepath.Join(f.dir, member+"-key.pem")}
	if passwords {
		return args
	}
	return append(args, "--trusted-ca-file", f.ca, "--client-cert-auth")
}

// url is the balancers' store URL.
func (f storeFiles) url(eps []string, prefix string, passwords bool) string {
	return store.URL{Endpoints: eps, Prefix: prefix, TLS: f.user(StoreUser, passwords)}.String()
}

// user is how the user StoreUser or root reaches the store.
func (f storeFiles) user(name string, passwords bool) *store.TLS {
	switch {
	case passwords && name == "root":
		return &store.TLS{CA: f.ca, User: name, PasswordFile: f.rootPassword}
	case passwords:
		return &store.TLS{CA: f.ca, User: name, PasswordFile: f.lbPassword}
	case name == "root":
		return &store.TLS{CA: f.ca, Cert: f.rootCert, Key: f.rootKey}
	}
	return &store.TLS{CA: f.ca, Cert: f.lbCert, Key: f.lbKey}
}

// StorePasswordFile is the file holding the lab balancers' etcd password (--store-passwords).
func StorePasswordFile(st *State) string { return storeFilesOf(st.Prefix).lbPassword }

// readPassword is a password file's first line.
func readPassword(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("lab: store password: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return line, nil
}

// writeStorePKI makes the lab's CA and certificates unless they exist (a lab brought up again
// keeps them).
func writeStorePKI(s *StoreState, f storeFiles) error {
	if _, err := os.Stat(f.ca); err == nil {
		return writeStorePasswords(f)
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("lab up: store certificates: %w", err)
	}
	if err := issueStorePKI(s, f, "switchyard lab etcd ca"); err != nil {
		return err
	}
	return writeStorePasswords(f)
}

// issueStorePKI makes a CA named cn and the certificates it signs (the members', the
// balancers', root's), written over the files there are: the members' and clients' first, the
// CA last.
func issueStorePKI(s *StoreState, f storeFiles, cn string) error {
	ca, err := pki.NewCA(cn, pkiLife)
	if err != nil {
		return err
	}
	for _, m := range s.Members {
		p, err := ca.Issue(m.Name, []netip.Addr{m.Addr}, nil, pkiLife)
		if err != nil {
			return err
		}
		if _, _, err := p.Write(f.dir, m.Name); err != nil {
			return err
		}
	}
	for _, user := range []string{StoreUser, "root"} {
		p, err := ca.Issue(user, nil, nil, pkiLife)
		if err != nil {
			return err
		}
		if _, _, err := p.Write(f.dir, user); err != nil {
			return err
		}
	}
	_, err = ca.WriteCA(f.dir)
	return err
}

// RotateStorePKI replaces the lab store's CA and every certificate, in place, and restarts the
// members, which then trust the new CA only: the daemons take the new files at their next
// connection without a restart (docs/fleet.md, "A secured store": rotation without a restart).
func RotateStorePKI(st *State) error {
	if st.Store == nil || st.Store.Plain {
		return errors.New("the lab's store is not secured: bring the lab up without --store-plain")
	}
	if err := issueStorePKI(st.Store, storeFilesOf(st.Prefix), "switchyard lab etcd ca (rotated "+time.Now().UTC().Format(time.RFC3339)+")"); err != nil {
		return err
	}
	for i := range st.Store.Members {
		if err := StopStoreMember(st, i+1); err != nil {
			return err
		}
		if err := StartStoreMember(st, i+1); err != nil {
			return err
		}
	}
	return nil
}

// StoreClientFiles are the balancers' CA, certificate and key files.
func StoreClientFiles(st *State) (ca, cert, key string) {
	f := storeFilesOf(st.Prefix)
	return f.ca, f.lbCert, f.lbKey
}

// writeStorePasswords makes the users' passwords (for --store-passwords) unless they exist.
func writeStorePasswords(f storeFiles) error {
	for _, file := range []string{f.lbPassword, f.rootPassword} {
		if _, err := os.Stat(file); err == nil {
			continue
		}
		if err := os.WriteFile(file, []byte(rand.Text()+"\n"), 0o600); err != nil {
			return fmt.Errorf("lab up: store password: %w", err)
		}
	}
	return nil
}

// openStoreRoot is a client of the store as etcd's root user (every key), dialling from the
// store namespace.
func openStoreRoot(s *StoreState, f storeFiles) (*store.Store, error) {
	u := store.URL{Endpoints: []string{netip.AddrPortFrom(s.Members[0].Addr, storeClient).String()}, Prefix: "/", TLS: f.user("root", s.Passwords)}
	dial := namednetns.Dialer(s.NS, &net.Dialer{Timeout: 2 * time.Second})
	return store.Open(u, store.Options{Dial: func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) }})
}

// StoreRoot is an etcd client of the lab's secured store as root, to change users and roles
// (tests take the balancers' permission away with it).
func StoreRoot(st *State) (*store.Store, error) {
	if st.Store == nil || st.Store.Plain {
		return nil, fmt.Errorf("the lab's store is not secured: bring the lab up without --store-plain")
	}
	return openStoreRoot(st.Store, storeFilesOf(st.Prefix))
}

// StoreEtcdRole is the etcd role of the lab's balancers: readwrite on the lab's prefix.
func StoreEtcdRole() string { return etcdauth.Grant{User: StoreUser}.Role() }

// enableStoreAuth connects as root from the store namespace and turns auth on with the
// balancers' user limited to the lab's prefix (again on a lab brought up again: it is kept).
func enableStoreAuth(s *StoreState, f storeFiles, prefix string) error {
	cl, err := openStoreRoot(s, f)
	if err != nil {
		return err
	}
	defer cl.Close()
	grant, root := etcdauth.Grant{User: StoreUser, Prefix: prefix}, ""
	if s.Passwords {
		if grant.Password, err = readPassword(f.lbPassword); err != nil {
			return err
		}
		if root, err = readPassword(f.rootPassword); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		if last = etcdauth.Enable(ctx, cl.Client(), root, []etcdauth.Grant{grant}); last == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("lab up: enable the store's auth: %w", last)
}
