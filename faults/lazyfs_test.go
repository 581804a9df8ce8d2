// lazyFS is a FUSE file system that models a disk with a volatile
// write cache, after LazyFS (github.com/dsrhaslab/lazyfs): a power cut
// loses every byte of file data that was written but not made durable. It exists to test that an acknowledged write
// survives a power cut, with a real process writing through the kernel.
//
// The model, precisely:
//
//   - The backing directory is the disk. Every operation on names and
//     metadata goes to it at once and is durable at once: create, mkdir,
//     mknod, symlink, link, rename, unlink, rmdir, chmod, chown, utimes,
//     and a change of a file's size by truncate(2), ftruncate(2) or
//     O_TRUNC. (Kinder than a real file system, where a rename or a new
//     file's name can be lost without an fsync of its directory; the
//     first power-cut measurements of sluice made the same assumption.)
//   - File data written with write(2)/pwrite(2) (and the growth of the
//     file it causes) is volatile. It becomes durable by
//     fsync(2) or fdatasync(2) on any descriptor of the same inode (then
//     all of the inode's data and its size as of that call are durable,
//     once the call has taken lazyOptions.SyncLatency: none by default), or
//     by a write through a descriptor opened with O_SYNC or O_DSYNC (then
//     that write's bytes are durable, and the size it extends the file to).
//     A directory's fsync does nothing (its entries are durable already).
//   - Cut (a power cut) first unmounts, which drops the kernel's page and
//     attribute caches of the mount, then gives every file its durable
//     image: each byte written since the file's last sync gets back its
//     durable content (zero where the file had none) and the file its
//     durable size. A file created and never synced is there, empty; a
//     file grown only by unsynced writes is back at its synced size. Then
//     Cut mounts again on the backing directory. Whatever wrote through the
//     mount must be stopped (kill -9) before the cut: an open descriptor
//     makes the unmount fail.
//
// Not modelled: torn or reordered writes (a synced write is kept whole,
// an unsynced one is lost whole, whatever the order), loss of metadata,
// syncfs(2) (on this kernel it is not forwarded to a FUSE daemon, so it
// makes nothing durable here — as it would not on a real disk whose
// cache only a per-file flush drains), sync_file_range(2), writes through
// a shared mmap (every file is opened FOPEN_DIRECT_IO: reads and writes
// bypass the kernel's page cache and each reaches this daemon, so no
// write can hide in a cache the model does not see), fallocate(2)
// (refused), O_TMPFILE (refused).
//
// Implementation: writes go to the backing file at once (so reads, stat,
// lseek see them as the writer expects) and the daemon keeps an undo
// image per inode — its durable size and the durable content of every
// 4 KiB page written since its last sync — which Cut writes back.
// Mounting needs root and /dev/fuse (DirectMountStrict: no fusermount).

package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// pageSize is the granularity of the undo image.
const pageSize = 4096

// lazyFS is a mounted lazyfs. Its methods may be called from any goroutine.
type lazyFS struct {
	mountpoint, backing string
	opts                lazyOptions

	// cuts counts the unmounts begun: an fsync whose latency spans one
	// makes nothing durable.
	cuts atomic.Int64

	mu     sync.Mutex // guards server (mountLazyFS, Cut, Close)
	server *fuse.Server

	// gate: every data operation holds it shared; Cut holds it alone
	// while it reverts the backing files, so no late request of the old
	// mount writes after the revert.
	gate   sync.RWMutex
	closed bool // under gate: no mount (a late request gets EIO)

	imu    sync.Mutex
	inodes map[uint64]*inode // by inode number, files written since the last Cut

	fsyncs, syncWrites, writes atomic.Int64
}

// lazyStats counts the operations the mount served since mountLazyFS.
type lazyStats struct {
	Writes     int64 // writes (each FUSE WRITE request)
	SyncWrites int64 // of them through an O_SYNC/O_DSYNC descriptor
	Fsyncs     int64 // fsync/fdatasync calls on files
}

// lazyLoss is what a Cut dropped.
type lazyLoss struct {
	Files int   // files whose data or size went back to their durable image
	Bytes int64 // bytes of unsynced data dropped: size shrunk, plus restored 4 KiB pages
}

// errLazyFSUnavailable wraps a failure to mount that says FUSE is not available
// here: /dev/fuse cannot be opened, or mount(2) is not permitted (not
// root). Any other failure is an error of its own.
var errLazyFSUnavailable = errors.New("lazyfs: cannot mount a FUSE file system here")

// lazyOptions tune a mount (the zero value: an fsync returns at once).
type lazyOptions struct {
	// SyncLatency is how long each fsync/fdatasync of a file takes before
	// it makes the inode's data durable and returns (at most
	// maxSyncLatency): a slow disk's flush, the window in which a caller
	// released before its sync returned can be caught by a cut. A cut
	// begun during the wait makes nothing of it durable (the call fails
	// EIO, as to a process killed by then it never returns).
	SyncLatency time.Duration
}

// maxSyncLatency bounds lazyOptions.SyncLatency: a Cut waits for the fsyncs
// in flight.
const maxSyncLatency = time.Second

// mountLazyFS mounts a lazyfs with opts at mountpoint (an existing empty
// directory) over the directory backing, which holds the durable state.
func mountLazyFS(mountpoint, backing string, opts lazyOptions) (*lazyFS, error) {
	if opts.SyncLatency < 0 || opts.SyncLatency > maxSyncLatency {
		return nil, fmt.Errorf("lazyfs: sync latency %v out of [0, %v]", opts.SyncLatency, maxSyncLatency)
	}
	f := &lazyFS{mountpoint: mountpoint, backing: backing, opts: opts, inodes: map[uint64]*inode{}}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

// Mountpoint is where the file system is mounted.
func (f *lazyFS) Mountpoint() string { return f.mountpoint }

// Backing is the backing directory (the disk).
func (f *lazyFS) Backing() string { return f.backing }

// lazyStats returns the counts of operations so far.
func (f *lazyFS) Stats() lazyStats {
	return lazyStats{Writes: f.writes.Load(), SyncWrites: f.syncWrites.Load(), Fsyncs: f.fsyncs.Load()}
}

func (f *lazyFS) mount() error {
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", errLazyFSUnavailable, err)
	}
	_ = dev.Close()
	var st syscall.Stat_t
	if err := syscall.Stat(f.backing, &st); err != nil {
		return fmt.Errorf("lazyfs: backing %s: %w", f.backing, err)
	}
	rootData := &fs.LoopbackRoot{Path: f.backing, Dev: uint64(st.Dev)}
	root := &node{LoopbackNode: &fs.LoopbackNode{RootData: rootData}, lfs: f}
	rootData.RootNode = root
	timeout := time.Second
	opts := &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            f.backing,
			Name:              "lazyfs",
			// Every byte must pass through the daemon: no passthrough
			// of reads and writes to the backing file by the kernel.
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
			MaxWrite:             1 << 20,
			// Requests are read with read(2), not spliced (which logs when
			// a 1 MiB write exceeds the pipe).
			DisableSplice: true,
		},
	}
	server, err := fs.Mount(f.mountpoint, root, opts)
	if errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("%w: mount %s: %v", errLazyFSUnavailable, f.mountpoint, err)
	}
	if err != nil {
		return fmt.Errorf("lazyfs: mount %s: %w", f.mountpoint, err)
	}
	f.mu.Lock()
	f.server = server
	f.mu.Unlock()
	f.gate.Lock()
	f.closed = false
	f.gate.Unlock()
	return nil
}

// unmount unmounts and waits until the daemon's loops are gone, then
// closes the gate.
func (f *lazyFS) unmount() error {
	f.cuts.Add(1)
	f.mu.Lock()
	server := f.server
	f.server = nil
	f.mu.Unlock()
	if server == nil {
		return nil
	}
	if err := server.Unmount(); err != nil {
		f.mu.Lock()
		f.server = server
		f.mu.Unlock()
		return fmt.Errorf("lazyfs: unmount %s (is a process still using it?): %w", f.mountpoint, err)
	}
	server.Wait()
	f.gate.Lock()
	f.closed = true
	f.gate.Unlock()
	return nil
}

// Cut is a power cut: it unmounts (every process writing through the
// mount must have exited), reverts every file to its durable image and
// mounts again. It reports what was dropped.
func (f *lazyFS) Cut() (lazyLoss, error) {
	if err := f.unmount(); err != nil {
		return lazyLoss{}, err
	}
	loss, err := f.revert()
	if err != nil {
		return loss, err
	}
	return loss, f.mount()
}

// Close unmounts, keeping the backing directory as last written (no cut).
func (f *lazyFS) Close() error {
	if err := f.unmount(); err != nil {
		return err
	}
	f.imu.Lock()
	defer f.imu.Unlock()
	for _, in := range f.inodes {
		in.clean()
	}
	f.inodes = map[uint64]*inode{}
	return nil
}

// revert writes every dirty inode's durable image back to its file.
func (f *lazyFS) revert() (lazyLoss, error) {
	f.gate.Lock()
	defer f.gate.Unlock()
	f.imu.Lock()
	defer f.imu.Unlock()
	var loss lazyLoss
	var errs []error
	for _, in := range f.inodes {
		in.mu.Lock()
		if in.fd >= 0 {
			b, err := in.revert()
			if err != nil {
				errs = append(errs, err)
			}
			loss.Files++
			loss.Bytes += b
		}
		in.clean()
		in.mu.Unlock()
	}
	f.inodes = map[uint64]*inode{}
	return loss, errors.Join(errs...)
}

// inodeOf returns the undo record of inode ino, creating it.
func (f *lazyFS) inodeOf(ino uint64) *inode {
	f.imu.Lock()
	defer f.imu.Unlock()
	in := f.inodes[ino]
	if in == nil {
		in = &inode{fd: -1}
		f.inodes[ino] = in
	}
	return in
}

// inode is the undo record of one file: clean (fd < 0, the file is its
// durable image) or dirty since its last sync.
type inode struct {
	mu    sync.Mutex
	fd    int              // a descriptor of the backing file while dirty, else -1
	dsize int64            // durable size (while dirty)
	pages map[int64][]byte // durable content of each page written since the last sync; nil: zeros
}

// dirty makes the record dirty on its first write since a sync: the
// backing file (reachable by fd) is its durable image at this moment.
func (in *inode) dirty(fd int) error {
	if in.fd >= 0 {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	// A descriptor of its own: the record outlives the handle that
	// wrote (and keeps the inode, so its number, while it is needed).
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	in.fd, in.dsize, in.pages = dup, st.Size, map[int64][]byte{}
	return nil
}

// save keeps the durable content of every page in [off, off+n) not yet
// kept, before a volatile write changes them.
func (in *inode) save(off, n int64) error {
	for p := off / pageSize; p <= (off+n-1)/pageSize; p++ {
		if _, ok := in.pages[p]; ok {
			continue
		}
		if p*pageSize >= in.dsize {
			in.pages[p] = nil // beyond the durable size: zeros
			continue
		}
		buf := make([]byte, pageSize)
		if _, err := syscall.Pread(in.fd, buf, p*pageSize); err != nil {
			return err
		}
		// Bytes past the durable size (a short read) stay zero.
		clear(buf[min(pageSize, in.dsize-p*pageSize):])
		in.pages[p] = buf
	}
	return nil
}

// durableWrite records that data at off is durable (an O_SYNC/O_DSYNC
// write) in a dirty record's image.
func (in *inode) durableWrite(data []byte, off int64) {
	end := off + int64(len(data))
	for p := off / pageSize; p <= (end-1)/pageSize; p++ {
		page, ok := in.pages[p]
		if !ok {
			continue // not written since the sync: the file holds its durable content
		}
		if page == nil {
			page = make([]byte, pageSize)
			in.pages[p] = page
		}
		from, to := max(off, p*pageSize), min(end, (p+1)*pageSize)
		copy(page[from-p*pageSize:to-p*pageSize], data[from-off:to-off])
	}
	in.dsize = max(in.dsize, end)
}

// truncated records a durable size change of a dirty record to size.
func (in *inode) truncated(size int64) {
	in.dsize = size
	for p, page := range in.pages {
		switch {
		case page == nil:
		case p*pageSize >= size:
			in.pages[p] = nil
		case (p+1)*pageSize > size:
			clear(page[size-p*pageSize:])
		}
	}
}

// revert writes the durable image back and reports the bytes dropped.
func (in *inode) revert() (int64, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(in.fd, &st); err != nil {
		return 0, err
	}
	var dropped int64
	zeros := make([]byte, pageSize)
	for p, page := range in.pages {
		if p*pageSize >= in.dsize {
			continue // cut off by the truncate below
		}
		if page == nil {
			page = zeros
		}
		if _, err := syscall.Pwrite(in.fd, page, p*pageSize); err != nil {
			return dropped, err
		}
		dropped += pageSize
	}
	if st.Size > in.dsize {
		dropped += st.Size - in.dsize
	}
	return dropped, syscall.Ftruncate(in.fd, in.dsize)
}

// clean forgets the undo image: the file is its durable image.
func (in *inode) clean() {
	if in.fd >= 0 {
		_ = syscall.Close(in.fd)
	}
	in.fd, in.dsize, in.pages = -1, 0, nil
}

// node is a loopback node whose files are lazyfs files.
type node struct {
	*fs.LoopbackNode
	lfs *lazyFS
}

var (
	_ fs.NodeWrapChilder = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeSetattrer   = (*node)(nil)
	_ fs.NodeTmpfiler    = (*node)(nil)
)

// WrapChild makes every node of the tree a lazyfs node.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), lfs: n.lfs}
}

// backingPath is the node's path in the backing directory.
func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(n.Root()))
}

// backingFlags are the open flags the backing file gets: the kernel hands
// over offsets (no O_APPEND), the model decides durability (no O_SYNC,
// O_DSYNC: the backing disk need not really sync), and the daemon's
// buffers are not aligned for O_DIRECT.
func backingFlags(flags uint32) int {
	return int(flags) &^ (syscall.O_APPEND | syscall.O_SYNC | syscall.O_DSYNC | syscall.O_DIRECT | fuse.FMODE_EXEC)
}

// Open opens the backing file; every file is direct I/O (no page cache).
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.lfs.gate.RLock()
	defer n.lfs.gate.RUnlock()
	if n.lfs.closed {
		return nil, 0, syscall.EIO
	}
	ino := n.StableAttr().Ino
	in := n.lfs.inodeOf(ino)
	in.mu.Lock()
	defer in.mu.Unlock()
	fd, err := syscall.Open(n.backingPath(), backingFlags(flags)|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	if flags&syscall.O_TRUNC != 0 && in.fd >= 0 {
		in.truncated(0)
	}
	return n.lfs.newFile(fd, ino, flags), fuse.FOPEN_DIRECT_IO, 0
}

// Create creates the file (durable at once, empty) and opens it.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.lfs.gate.RLock()
	defer n.lfs.gate.RUnlock()
	if n.lfs.closed {
		return nil, nil, 0, syscall.EIO
	}
	p := filepath.Join(n.backingPath(), name)
	fd, err := syscall.Open(p, backingFlags(flags)|syscall.O_CREAT|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		_ = syscall.Close(fd)
		return nil, nil, 0, fs.ToErrno(err)
	}
	child := n.NewInode(ctx, &fs.LoopbackNode{RootData: n.RootData}, n.stable(fd, &st))
	ino := child.StableAttr().Ino
	in := n.lfs.inodeOf(ino)
	in.mu.Lock()
	if flags&syscall.O_TRUNC != 0 && in.fd >= 0 {
		in.truncated(0)
	}
	in.mu.Unlock()
	out.FromStat(&st)
	return child, n.lfs.newFile(fd, ino, flags), fuse.FOPEN_DIRECT_IO, 0
}

// stable is the node identity go-fuse's loopback gives (at a Lookup) the
// file fd, of stat st: the inode number mixed with the device, the
// generation from the birth time.
func (n *node) stable(fd int, st *syscall.Stat_t) fs.StableAttr {
	swapped := (uint64(st.Dev) << 32) | (uint64(st.Dev) >> 32)
	swappedRootDev := (n.RootData.Dev << 32) | (n.RootData.Dev >> 32)
	gen := uint64(1)
	var x unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BTIME, &x) == nil && x.Mask&unix.STATX_BTIME != 0 &&
		(x.Btime.Sec != 0 || x.Btime.Nsec != 0) {
		gen = uint64(x.Btime.Sec)*1e9 + uint64(x.Btime.Nsec)
	}
	return fs.StableAttr{Mode: st.Mode, Ino: (swapped ^ swappedRootDev) ^ st.Ino, Gen: gen}
}

// Tmpfile is refused: an O_TMPFILE file has no name the model could follow.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// Setattr applies attribute changes at once (durable); a size change also
// sets the durable size of a dirty file.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	size, ok := in.GetSize()
	if !ok {
		return n.LoopbackNode.Setattr(ctx, f, in, out)
	}
	n.lfs.gate.RLock()
	defer n.lfs.gate.RUnlock()
	if n.lfs.closed {
		return syscall.EIO
	}
	rec := n.lfs.inodeOf(n.StableAttr().Ino)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	errno := n.LoopbackNode.Setattr(ctx, f, in, out)
	if errno == 0 && rec.fd >= 0 {
		rec.truncated(int64(size))
	}
	return errno
}

// file is an open lazyfs file.
type file struct {
	lfs  *lazyFS
	f    *os.File
	fd   int
	ino  uint64
	sync bool // opened O_SYNC or O_DSYNC: every write is durable
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileSetattrer = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
)

func (f *lazyFS) newFile(fd int, ino uint64, flags uint32) *file {
	return &file{lfs: f, f: os.NewFile(uintptr(fd), ""), fd: fd, ino: ino, sync: flags&syscall.O_DSYNC != 0}
}

// Read reads the file as last written.
func (h *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.lfs.gate.RLock()
	defer h.lfs.gate.RUnlock()
	if h.lfs.closed {
		return nil, syscall.EIO
	}
	n, err := syscall.Pread(h.fd, buf, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(buf[:n]), 0
}

// Write writes to the backing file, keeping the durable content it
// replaces unless the descriptor is O_SYNC/O_DSYNC.
func (h *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.lfs.gate.RLock()
	defer h.lfs.gate.RUnlock()
	if h.lfs.closed {
		return 0, syscall.EIO
	}
	h.lfs.writes.Add(1)
	if len(data) == 0 {
		return 0, 0
	}
	in := h.lfs.inodeOf(h.ino)
	in.mu.Lock()
	defer in.mu.Unlock()
	if h.sync {
		h.lfs.syncWrites.Add(1)
		n, err := syscall.Pwrite(h.fd, data, off)
		if n > 0 && in.fd >= 0 {
			in.durableWrite(data[:n], off)
		}
		return uint32(max(n, 0)), fs.ToErrno(err)
	}
	if err := in.dirty(h.fd); err != nil {
		return 0, fs.ToErrno(err)
	}
	if err := in.save(off, int64(len(data))); err != nil {
		return 0, fs.ToErrno(err)
	}
	n, err := syscall.Pwrite(h.fd, data, off)
	return uint32(max(n, 0)), fs.ToErrno(err)
}

// Fsync makes all of the inode's data durable (fsync and fdatasync alike),
// after lazyOptions.SyncLatency.
func (h *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	cuts := h.lfs.cuts.Load()
	if d := h.lfs.opts.SyncLatency; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done(): // interrupted (the caller was killed): nothing durable
			t.Stop()
			return syscall.EINTR
		}
	}
	h.lfs.gate.RLock()
	defer h.lfs.gate.RUnlock()
	if h.lfs.closed || h.lfs.cuts.Load() != cuts {
		return syscall.EIO // a cut began meanwhile
	}
	h.lfs.fsyncs.Add(1)
	in := h.lfs.inodeOf(h.ino)
	in.mu.Lock()
	in.clean()
	in.mu.Unlock()
	return 0
}

// Flush (at every close of a descriptor) makes nothing durable.
func (h *file) Flush(ctx context.Context) syscall.Errno { return 0 }

// Release closes the backing descriptor.
func (h *file) Release(ctx context.Context) syscall.Errno {
	return fs.ToErrno(h.f.Close())
}

// Getattr stats the backing file (its size as last written).
func (h *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

// Setattr changes the backing file's attributes (the node's Setattr keeps
// the undo image of a size change).
func (h *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if mode, ok := in.GetMode(); ok {
		if err := syscall.Fchmod(h.fd, mode); err != nil {
			return fs.ToErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		if err := syscall.Fchown(h.fd, u, g); err != nil {
			return fs.ToErrno(err)
		}
	}
	if size, ok := in.GetSize(); ok {
		if err := syscall.Ftruncate(h.fd, int64(size)); err != nil {
			return fs.ToErrno(err)
		}
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if mok || aok {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(atime.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mtime.UnixNano())
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", h.fd), ts, 0); err != nil {
			return fs.ToErrno(err)
		}
	}
	return h.Getattr(ctx, out)
}

// Lseek seeks the backing file (SEEK_DATA, SEEK_HOLE).
func (h *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	n, err := unix.Seek(h.fd, int64(off), int(whence))
	return uint64(n), fs.ToErrno(err)
}

// lazyFSForTest mounts a lazyfs at mountpoint over backing and unmounts it
// at the end of the test. Where FUSE cannot be mounted (no /dev/fuse, not
// root) the test fails when the environment says CI=true, and is skipped,
// saying why, elsewhere.
func lazyFSForTest(t testing.TB, mountpoint, backing string) *lazyFS {
	t.Helper()
	return lazyFSForTestWith(t, mountpoint, backing, lazyOptions{})
}

// lazyFSForTestWith is lazyFSForTest with options.
func lazyFSForTestWith(t testing.TB, mountpoint, backing string, opts lazyOptions) *lazyFS {
	t.Helper()
	f, err := mountLazyFS(mountpoint, backing, opts)
	if err != nil {
		if errors.Is(err, errLazyFSUnavailable) && os.Getenv("CI") != "true" {
			t.Skipf("power-loss harness unavailable (needs root and /dev/fuse; fails instead with CI=true): %v", err)
		}
		t.Fatalf("the power-loss harness must run here (CI=true: root and /dev/fuse): %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}
