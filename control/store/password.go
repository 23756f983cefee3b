package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Password users: etcds://...?ca=FILE&user=NAME&password_file=FILE. The client authenticates
// as NAME and sends etcd's token with every request. This is done here, not by etcd's client
// (clientv3.Config.Username), which authenticates inside clientv3.New and fails it while etcd
// is unreachable: a node must start from its cached snapshot then and keep forwarding. The
// password is read from its file at each authentication, so a fixed file is taken at the next
// attempt without a restart. A request refused for its token (expired, etcd restarted, the
// user's roles changed) authenticates again and is retried once; a new stream (a watch)
// authenticates first, as etcd's client does.

// authenticateMethod is etcd's Authenticate RPC, which carries no token.
const authenticateMethod = "/etcdserverpb.Auth/Authenticate"

// passwordAuth keeps a password user's token.
type passwordAuth struct {
	user, file string

	mu    sync.Mutex                // one authentication at a time
	token atomic.Pointer[authToken] // nil: not authenticated
}

type authToken struct {
	value string // "" when etcd has auth off (nothing to send)
}

func newPasswordAuth(t *TLS) *passwordAuth { return &passwordAuth{user: t.User, file: t.PasswordFile} }

// dialOptions send the token and keep it current.
func (a *passwordAuth) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithPerRPCCredentials(tokenCreds{a}),
		grpc.WithChainUnaryInterceptor(a.unary), grpc.WithChainStreamInterceptor(a.stream)}
}

// password reads the password file's first line.
func (a *passwordAuth) password() (string, error) {
	b, err := os.ReadFile(a.file)
	if err != nil {
		return "", fmt.Errorf("read the password of etcd user %s: %w: give a file holding it as ?password_file=FILE", a.user, err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) == 0 {
		return "", fmt.Errorf("read the password of etcd user %s: %s is empty: write the user's password on its first line", a.user, a.file)
	}
	return string(line), nil
}

// authenticate gets a new token unless one newer than stale was got meanwhile.
func (a *passwordAuth) authenticate(ctx context.Context, cc *grpc.ClientConn, stale *authToken) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur := a.token.Load(); cur != nil && cur != stale {
		return nil
	}
	pw, err := a.password()
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second) // a watch's context has no deadline
	defer cancel()
	resp, err := pb.NewAuthClient(cc).Authenticate(actx, &pb.AuthenticateRequest{Name: a.user, Password: pw})
	switch {
	case rpctypes.Error(err) == rpctypes.ErrAuthNotEnabled:
		a.token.Store(&authToken{})
	case err != nil:
		a.token.Store(nil)
		return fmt.Errorf("authenticate as etcd user %s: %w", a.user, rpctypes.Error(err))
	default:
		a.token.Store(&authToken{value: resp.Token})
	}
	return nil
}

// tokenRefused reports whether etcd refused a request for its token (not for a permission).
func tokenRefused(err error) bool {
	switch rpctypes.Error(err) {
	case rpctypes.ErrInvalidAuthToken, rpctypes.ErrAuthOldRevision, rpctypes.ErrUserEmpty:
		return true
	}
	return false
}

func (a *passwordAuth) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == authenticateMethod {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	tok := a.token.Load()
	if tok == nil {
		if err := a.authenticate(ctx, cc, nil); err != nil {
			return err
		}
		tok = a.token.Load()
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if !tokenRefused(err) {
		return err
	}
	if err := a.authenticate(ctx, cc, tok); err != nil {
		return err
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (a *passwordAuth) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if err := a.authenticate(ctx, cc, a.token.Load()); err != nil {
		return nil, err
	}
	return streamer(ctx, desc, cc, method, opts...)
}

// tokenCreds put the token in each request's metadata (etcd's "token" key).
type tokenCreds struct{ a *passwordAuth }

func (c tokenCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if ri, ok := credentials.RequestInfoFromContext(ctx); ok && ri.Method == authenticateMethod {
		return nil, nil
	}
	tok := c.a.token.Load()
	if tok == nil || tok.value == "" {
		return nil, nil
	}
	return map[string]string{rpctypes.TokenFieldNameGRPC: tok.value}, nil
}

// RequireTransportSecurity: a token never crosses the network in clear.
func (tokenCreds) RequireTransportSecurity() bool { return true }
