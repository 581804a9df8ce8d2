package durability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// RecordFile is the name, in the data dir, of the record of the streams a
// node held and the last sequence of each known to be durable
// (docs/RELIABILITY.md "Never up silently empty").
const RecordFile = "sluice-streams.json"

// RecordInterval is how often the record's round runs: a sync round every
// time (so a stream configuration replaced without a message is durable
// within one interval), and the record rewritten only when a stream's last
// sequence moved; never on a hook's path.
const RecordInterval = time.Second

// Record is what a node remembers of its streams across restarts.
type Record struct {
	Version int `json:"version"`
	// Streams maps each stream's name to its last sequence known to be on
	// stable storage (a sync round completed after the sequence was read).
	Streams map[string]uint64 `json:"streams"`
	Updated time.Time         `json:"updated"`
}

// ReadRecord reads the record at path; ok is false when there is none.
func ReadRecord(path string) (rec Record, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Version != 1 {
		return Record{}, false, fmt.Errorf("durability: %s is not a stream record (delete it to start afresh): %v", path, err)
	}
	return rec, true, nil
}

// WriteRecord writes rec at path durably: a temporary file written and
// fsynced, renamed into place, the directory fsynced.
func WriteRecord(path string, rec Record) error {
	rec.Version = 1
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("durability: write %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// CheckRecord compares the streams a node has now with its record: one
// line per stream that is missing or whose last sequence is below the
// recorded one (acknowledged writes lost), sorted; nil when nothing is.
func CheckRecord(rec Record, now map[string]uint64) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(rec.Streams)) {
		want := rec.Streams[name]
		got, ok := now[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("stream %s is missing (it held %d messages' sequences)", name, want))
		case got < want:
			out = append(out, fmt.Sprintf("stream %s ends at sequence %d, below the %d it had made durable", name, got, want))
		}
	}
	return out
}

// ErrDataLoss is returned by Start when the store lacks what its
// record says it made durable (as a *DataLossError).
var ErrDataLoss = errors.New("durability: the data dir lost durable data")

// DataLossError says what a data dir lost and how to proceed.
type DataLossError struct {
	DataDir string
	Lost    []string // one line per stream (CheckRecord)
}

func (e *DataLossError) Error() string {
	return fmt.Sprintf("%v: %s; the store under %s no longer holds what this node acknowledged "+
		"(a power cut with durability off, a restored or edited data dir?): restore the data dir, "+
		"or start once with --accept-data-loss=true to run on what is left", ErrDataLoss, strings.Join(e.Lost, "; "), e.DataDir)
}

func (e *DataLossError) Unwrap() error { return ErrDataLoss }

// checkStart checks the streams of a single node's server s against the
// record in dataDir. With accept, a loss is logged and the record
// rewritten from what is there; without, it is ErrDataLoss naming what is
// missing and how to proceed.
func checkStart(s Embedded, dataDir string, accept bool, log *slog.Logger) error {
	path := filepath.Join(dataDir, RecordFile)
	rec, ok, err := ReadRecord(path)
	if err != nil || !ok {
		return err
	}
	now, err := s.StreamSeqs()
	if err != nil {
		return err
	}
	lost := CheckRecord(rec, now)
	if len(lost) == 0 {
		return nil
	}
	if !accept {
		return &DataLossError{DataDir: dataDir, Lost: lost}
	}
	log.Error("starting on a store that lost durable data (--accept-data-loss)", "lost", strings.Join(lost, "; "))
	return WriteRecord(path, Record{Streams: now, Updated: time.Now().UTC()})
}

// ClusterSettled is how long the cluster's answer for each recorded
// stream that is short (missing or below its record) must stay the same
// before CheckClusterStart calls it a loss rather than a cluster still
// catching up (leaders are elected with every committed write; a stream
// being caught up moves).
const ClusterSettled = 5 * time.Second

// CheckClusterStart is the start check for a node of a cluster, whose recorded
// streams may be led by other servers: seqs reads the leaders' last
// sequences (a stream absent from the map is not there). It waits until
// every recorded stream reaches its recorded sequence; a loss is what is
// still short when ctx ends or when no short stream's answer has moved for
// ClusterSettled (each stream's own: one that stops being short, or other
// streams moving, does not restart the others'). A node without a record
// passes at once.
func CheckClusterStart(ctx context.Context, dataDir string, accept bool, log *slog.Logger, seqs func(ctx context.Context, names []string) (map[string]uint64, error)) error {
	return checkClusterStart(ctx, dataDir, accept, ClusterSettled, log, seqs)
}

// checkClusterStart is CheckClusterStart with settle for ClusterSettled
// (a test's is shorter).
func checkClusterStart(ctx context.Context, dataDir string, accept bool, settle time.Duration, log *slog.Logger, seqs func(ctx context.Context, names []string) (map[string]uint64, error)) error {
	path := filepath.Join(dataDir, RecordFile)
	rec, ok, err := ReadRecord(path)
	if err != nil || !ok {
		return err
	}
	names := slices.Sorted(maps.Keys(rec.Streams))
	// answer is what the cluster says of one stream.
	type answer struct {
		seq uint64
		ok  bool // the stream is there
	}
	var (
		lost  []string
		now   map[string]uint64
		seen  = map[string]answer{}    // each stream's last answer
		since = map[string]time.Time{} // when it was first answered as it is
		last  error
		said  = time.Now()
	)
	// allSettled: every short stream's answer has stayed the same for
	// settle; a stream that is not short may keep moving (the leases of
	// the nodes already up).
	allSettled := func() bool {
		for _, name := range names {
			if got, ok := now[name]; (!ok || got < rec.Streams[name]) && time.Since(since[name]) < settle {
				return false
			}
		}
		return true
	}
	for {
		got, err := seqs(ctx, names)
		last = err
		if err == nil {
			if lost = CheckRecord(rec, got); len(lost) == 0 {
				return nil
			}
			at := time.Now()
			for _, name := range names {
				var a answer
				a.seq, a.ok = got[name]
				if prev, had := seen[name]; !had || prev != a {
					seen[name], since[name] = a, at
				}
			}
			now = got
		}
		if time.Since(said) >= 5*time.Second {
			said = time.Now()
			log.Warn("waiting for the cluster to bring back the streams this node recorded", "short", strings.Join(lost, "; "), "error", last)
		}
		settled := now != nil && allSettled()
		if settled || ctx.Err() != nil {
			if now == nil {
				return fmt.Errorf("durability: the cluster did not answer for the recorded streams before the start deadline: %w", errors.Join(ctx.Err(), last))
			}
			if !accept {
				return &DataLossError{DataDir: dataDir, Lost: lost}
			}
			log.Error("starting on a cluster that lost durable data (--accept-data-loss)", "lost", strings.Join(lost, "; "))
			return WriteRecord(path, Record{Streams: now, Updated: time.Now().UTC()})
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Recorder keeps the record of a data dir up to date: every
// RecordInterval it reads the sequences, waits for a sync round (so that
// they, and any stream configuration replaced since, are durable) and,
// when a stream's last sequence moved, writes the record. One owned goroutine; Stop ends it.
type Recorder struct {
	srv  Embedded
	sync func(context.Context) error
	path string
	log  *slog.Logger

	stop chan struct{}
	done chan struct{}
	once sync.Once
	last map[string]uint64
}

// StartRecorder starts the recorder of dataDir over srv, sync being the
// barrier whose round makes the read sequences durable.
func StartRecorder(srv Embedded, dataDir string, sync func(context.Context) error, log *slog.Logger) *Recorder {
	r := &Recorder{srv: srv, sync: sync, path: filepath.Join(dataDir, RecordFile), log: log,
		stop: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *Recorder) loop() {
	defer close(r.done)
	t := time.NewTicker(RecordInterval)
	defer t.Stop()
	for {
		if err := r.Update(); err != nil {
			r.log.Warn("stream record not updated", "error", err)
		}
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
	}
}

// Update runs a sync round and brings the record up to date now. The round
// runs even when no sequence moved: nats-server replaces a stream's
// meta.inf on a configuration update without syncing it.
func (r *Recorder) Update() error {
	seqs, err := r.srv.StreamSeqs()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.sync(ctx); err != nil {
		return err
	}
	if maps.Equal(seqs, r.last) {
		return nil
	}
	if err := WriteRecord(r.path, Record{Streams: seqs, Updated: time.Now().UTC()}); err != nil {
		return err
	}
	r.last = seqs
	return nil
}

// Stop ends the recorder after one last update (a clean shutdown leaves
// the record current).
func (r *Recorder) Stop() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
	if err := r.Update(); err != nil {
		r.log.Warn("stream record not updated at stop", "error", err)
	}
}
