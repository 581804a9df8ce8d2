package durability

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/sluice-dev/sluice/internal/option"
	"github.com/sluice-dev/sluice/protocol"
)

// The cluster's group sync (docs/DESIGN.md "Durability on a cluster"):
// on an embedded cluster whose streams are R1, a write is acknowledged by
// the one server that holds its stream, from its page cache. Every node
// serves protocol.NodeSyncSubject: a request joins the next round of that node's
// own group sync (the streams answers rest on, and the Raft logs) and
// is answered with the streams the node leads. A node's barrier round
// (Rounds.Round) asks every node at once and succeeds when the answers
// cover every stream that exists and a majority of the cluster's servers
// (the meta group's log, which holds the streams themselves): one request
// per node per round, shared by every hook that waits on it.

// ErrNotConfirmed is a round that the servers did not confirm:
// its writes may not be on disk (a 503 for the hooks that waited on it,
// not a failed disk: the next round may succeed).
var ErrNotConfirmed = errors.New("durability: the cluster's sync round was not confirmed")

// Rounds are the rounds of a cluster node's barrier: each asks every
// node (protocol.NodeSyncSubject) to run a round of its group sync, and succeeds
// once a majority of all the cluster's servers (Peers(true): the meta
// group's log) and the leader of every stream that exists (Streams(),
// and every stream ever seen led) have answered OK. When a majority
// answered but some streams' leaders did not (a server down, restarted,
// or its round failed), it returns an *UnconfirmedError naming those
// streams: a caller whose writes went to none of them is durable. Without
// a majority it returns ErrNotConfirmed. It stops waiting as soon as it
// has succeeded, when every server up (Peers(false)) has answered, or
// after the round timeout.
type Rounds struct {
	nc      *nats.Conn
	subject string
	cl      Cluster
	timeout time.Duration

	inbox   string
	sub     *nats.Subscription
	replies chan *nats.Msg

	mu        sync.Mutex
	seq       uint64
	lastStart time.Time       // when the previous round began
	seen      map[string]bool // the streams ever seen led
	readAt    time.Time       // when all, online and exist were read
	readAge   time.Duration   // how long they are trusted (clusterMaxAge)
	all       []string
	online    []string
	exist     []string
	existRead bool           // exist was read once
	listing   bool           // a read of exist is under way (refresh)
	refresh   sync.WaitGroup // that read, waited for by Close
}

// UnconfirmedError is a round that a majority of the servers confirmed,
// but not the leaders of Streams: writes to those may not be on disk.
type UnconfirmedError struct {
	Streams []string
	Detail  string
}

func (e *UnconfirmedError) Error() string {
	return fmt.Sprintf("%v: streams %v unconfirmed: %s", ErrNotConfirmed, e.Streams, e.Detail)
}

// Unwrap makes it an ErrNotConfirmed.
func (e *UnconfirmedError) Unwrap() error { return ErrNotConfirmed }

// Cluster is what a round reads of the cluster (natsembed's server and the
// JetStream API; ClusterOf).
type Cluster interface {
	// Peers is the cluster's servers, offline ones too when withOffline.
	Peers(withOffline bool) []string
	// Streams lists the streams a round must find led (an error keeps the
	// last list).
	Streams() ([]string, error)
}

// ClusterOf is a node's Cluster: srv's peers (natsembed.Server), and of
// streams those that exist, listed through js (a second at most per read).
func ClusterOf(srv interface {
	ClusterPeers(withOffline bool) []string
}, js jetstream.JetStream, streams []string) Cluster {
	return nodeCluster{srv: srv, js: js, streams: streams}
}

type nodeCluster struct {
	srv interface {
		ClusterPeers(withOffline bool) []string
	}
	js      jetstream.JetStream
	streams []string
}

func (c nodeCluster) Peers(withOffline bool) []string { return c.srv.ClusterPeers(withOffline) }

func (c nodeCluster) Streams() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	names := c.js.StreamNames(ctx)
	var found []string
	for n := range names.Name() {
		if slices.Contains(c.streams, n) {
			found = append(found, n)
		}
	}
	return found, names.Err()
}

// protocol.ErrInvalidOption is wrapped by the error of NewRounds for an option
// with an invalid argument or a missing dependency.
var errInvalidOption = fmt.Errorf("durability: %w", protocol.ErrInvalidOption)

// RoundsOption configures NewRounds.
type RoundsOption interface{ applyRounds(*Rounds) error }

type roundsOption func(*Rounds) error

func (o roundsOption) applyRounds(r *Rounds) error { return o(r) }

// WithRoundTimeout bounds one round (default RoundTimeout; must be > 0).
func WithRoundTimeout(d time.Duration) RoundsOption {
	return roundsOption(option.Positive(errInvalidOption, "round timeout", d, func(r *Rounds, d time.Duration) { r.timeout = d }))
}

// NewRounds prepares the rounds (Round) of a barrier on nc, asking on
// subject and reading c; Close releases its subscription. Errors:
// protocol.ErrInvalidOption, the subscription's.
func NewRounds(nc *nats.Conn, subject string, c Cluster, opts ...RoundsOption) (*Rounds, error) {
	r := &Rounds{
		nc: nc, subject: subject, cl: c, timeout: RoundTimeout,
		inbox:     nats.NewInbox() + "." + nuid.Next(),
		replies:   make(chan *nats.Msg, 64),
		lastStart: time.Now(),
		seen:      map[string]bool{},
		readAge:   clusterMaxAge,
	}
	if err := option.Apply(r, opts, RoundsOption.applyRounds); err != nil {
		return nil, err
	}
	if nc == nil || c == nil {
		return nil, option.Invalid(errInvalidOption, "NewRounds needs a connection and a cluster")
	}
	var err error
	r.sub, err = nc.Subscribe(r.inbox+".*", func(m *nats.Msg) {
		select {
		case r.replies <- m:
		default: // the round stopped listening: dropped
		}
	})
	if err != nil {
		return nil, fmt.Errorf("durability: node sync replies: %w", err)
	}
	return r, nil
}

// Close stops listening for answers.
func (r *Rounds) Close() error {
	err := r.sub.Unsubscribe()
	r.refresh.Wait()
	return err
}

// Round runs one round (the GroupSync's round function: rounds never
// overlap).
func (r *Rounds) Round() error {
	start := time.Now()
	all, online, exist := r.cluster(start)
	r.mu.Lock()
	r.seq++
	token := strconv.FormatUint(r.seq, 10)
	prev := r.lastStart
	r.lastStart = start
	need := maps.Clone(r.seen)
	r.mu.Unlock()
	for _, s := range exist {
		need[s] = true
	}
	quorum := len(all)/2 + 1
	// Answers of an earlier round that came too late.
	for drained := false; !drained; {
		select {
		case <-r.replies:
		default:
			drained = true
		}
	}
	ask := func() error {
		if err := r.nc.PublishRequest(r.subject, r.inbox+"."+token, nil); err != nil {
			return fmt.Errorf("%w: asking the nodes to sync: %v", ErrNotConfirmed, err)
		}
		return nil
	}
	if err := ask(); err != nil {
		return err
	}
	// A server whose interest had not reached this one when it asked (it
	// has just started) never saw the request: ask again, less and less
	// often (the others answer again, once more each at most per ask).
	again, wait := time.NewTimer(askAgain), askAgain
	defer again.Stop()
	timer := time.NewTimer(r.timeout)
	defer timer.Stop()
	answered := map[string]bool{}
	var led, refused []string
	end := func() error {
		if len(answered) < quorum {
			var waiting []string
			for _, s := range all {
				if !answered[s] {
					waiting = append(waiting, s)
				}
			}
			return fmt.Errorf("%w: %d of the %d servers needed confirmed (not %v; refused: %v)", ErrNotConfirmed, len(answered), quorum, waiting, refused)
		}
		r.mu.Lock()
		for _, s := range led {
			r.seen[s] = true
		}
		r.mu.Unlock()
		if len(need) == 0 {
			return nil
		}
		return &UnconfirmedError{Streams: slices.Sorted(maps.Keys(need)), Detail: fmt.Sprintf("no answer from their leaders (refused: %v)", refused)}
	}
	for {
		if len(answered) >= quorum && len(need) == 0 || len(answered)+len(refused) >= len(online) {
			return end()
		}
		select {
		case m := <-r.replies:
			if m.Subject != r.inbox+"."+token {
				continue
			}
			var a protocol.SyncReply
			if err := json.Unmarshal(m.Data, &a); err != nil || !slices.Contains(all, a.Server) || answered[a.Server] || slices.Contains(refused, a.Server) {
				continue // not a server of this cluster, or answered already
			}
			// A server that began after the previous round began may
			// have begun after a write of this round's was acknowledged
			// (and have lost it): its answer vouches for nothing yet.
			if a.Error != "" || time.Now().Add(-time.Duration(a.UptimeNS)).After(prev) {
				refused = append(refused, a.Server+": "+cmp.Or(a.Error, "started after the round's writes"))
				continue
			}
			answered[a.Server] = true
			for _, s := range a.Leads {
				delete(need, s)
				led = append(led, s)
			}
		case <-again.C:
			if err := ask(); err != nil {
				return err
			}
			wait *= 2
			again.Reset(wait)
		case <-timer.C:
			return end()
		}
	}
}

// cluster is the cluster's servers (offline ones included), the servers
// up and the streams that exist, read at most every clusterMaxAge. The
// streams (a JetStream API request, which waits for the meta leader) are
// read on the round's path only until one read succeeded; after that in
// the background, so that a meta leader election does not hold up rounds
// of R1 streams, which do not need it.
func (r *Rounds) cluster(now time.Time) (all, online, exist []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.readAt.IsZero() || now.Sub(r.readAt) > r.readAge {
		r.all, r.online = r.cl.Peers(true), r.cl.Peers(false)
		r.readAt = now
		switch {
		case !r.existRead:
			if names, err := r.cl.Streams(); err == nil {
				r.exist, r.existRead = names, true
			}
		case !r.listing:
			r.listing = true
			r.refresh.Go(func() {
				names, err := r.cl.Streams()
				r.mu.Lock()
				defer r.mu.Unlock()
				if err == nil {
					r.exist = names
				}
				r.listing = false
			})
		}
	}
	return r.all, r.online, r.exist
}

// RoundTimeout bounds one round of a cluster node's barrier: a server
// that has not answered by then leaves its streams unconfirmed (503 for the
// hooks whose writes went to them).
const RoundTimeout = time.Second

// askAgain is how long a round waits for every answer before it asks
// again (then twice as long each time).
const askAgain = 50 * time.Millisecond

// clusterMaxAge is how long a round trusts what it read of the cluster.
const clusterMaxAge = time.Second
