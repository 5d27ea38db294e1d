#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""soak - random coffer operations with crashes and state loss, checked against a model

SYNOPSIS
    soak.py [--seed N] [--ops N | --minutes M | --hours H] [--without KIND,...]
            [--weight KIND=W,...] [--disrupt P] [--keep] [--shrink] [--quiet]
            [--list-kinds]

DESCRIPTION
    soak runs the real cofferd (COFFERD) on LUN files in a temporary
    directory of its own and drives it with the coffer client (COFFER): a
    seeded random mix of the state-changing verbs (pool add, export,
    import with and without -d, scrub, offline, online, replace, attach,
    detach, clear; create of clear and encrypted datasets of every suite
    and keyformat, destroy -r and -R, set and inherit, snapshot, destroy of
    snapshots and ranges, rollback, clone, promote, rename of datasets and
    snapshots, send and receive full,
    incremental, plain and raw between two pools, load-key, unload-key,
    change-key) and record writes, each acknowledged result applied to a
    model of what must be true: the datasets, their origins, local
    properties, snapshots, and the content of every record of every
    dataset and snapshot.

    Between operations, at random (--disrupt, the chance per operation),
    it disrupts the daemon: kill -9 and restart, kill -9 with the state
    directory deleted and every pool imported from its LUNs (pool import
    -d), SIGTERM and restart, SIGSTOP and SIGCONT, export of every pool
    and import from the LUNs alone, kill -9 during a scrub, a resilver, a
    receive or a create (which must then be there whole, or not at all,
    and there if it was acknowledged), and, when the fault shim
    tests/fault/faultinj.so is built, EIO on the writes, reads (or short
    reads) or fsyncs of one side of a healthy mirror while records are
    written and read: nothing may be refused or lost; the side is put
    back with pool online afterwards.
    After each disruption every invariant is checked: every dataset,
    snapshot, origin, volsize, encryption and local property of the
    model present and nothing else, every acknowledged record of the
    datasets (and of a third of the snapshots) read back with its
    content (coffer read, or NBD when python3-libnbd is installed), each
    pool ONLINE with the vdevs the model has (DEGRADED only for sides
    taken offline), coffer pool check clean. After every operation
    cofferd must be alive: a daemon that died of anything but the
    driver's own signal fails the run, as does an operation the model
    says must succeed that fails (a refusal the model expects, such as
    destroy of a dataset with snapshots, is checked to leave no trace).

    The seed alone decides the operations and disruptions, so --seed N
    replays a run (timing may still change what an interrupted operation
    left). On a failure soak prints the seed, the operation number, the
    operation and the invariant it broke, and the last 30 operations, and
    exits 1.

OPTIONS
    --seed N        the random seed (default: from the clock, printed)
    --ops N         operations to run (default 200)
    --minutes M, --hours H
                    run for that long instead of a number of operations
    --without K,... leave these operation kinds out (--list-kinds lists them)
    --weight K=W,...
                    change the weight of operation kinds (default 1 to 10)
    --disrupt P     chance of a disruption after each operation (default 0.08)
    --keep          keep the work directory (always kept on a failure)
    --shrink        on a failure, replay the run with each disruption and
                    operation left out in turn, and print the shortest
                    sequence that still fails
    --quiet         print only the summary
    --list-kinds    list the operation and disruption kinds and exit

ENVIRONMENT
    COFFERD, COFFER  the binaries (default: daemon/cofferd and client/coffer
                     under the working directory, a build tree, or beside
                     this file's ../.., else from PATH)
    COFFER_FAULTINJ  the fault shim (default: tests/fault/faultinj.so of the
                     build directory; without it the fault kinds do nothing)
    TMPDIR           where the work directory is made

FILES
    The work directory (kept on a failure and with --keep) holds
    cofferd.conf, cofferd.log, ops.log (every operation and disruption,
    numbered), the LUN files (luns/), the key files (keys/) and the state
    directory (state/).

EXIT STATUS
    0 all invariants held, 1 an invariant failed, 2 usage, 77 no binaries.
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# How the model works. Each dataset of the model (Ds) holds, per record, the
# tuple of contents a read may return: one after an acknowledged write, more
# while it is not known which landed (a write to a sync=disabled dataset until
# the next commit, a write that failed); a verify after a recovery narrows it
# to what the LUNs kept. Snapshots copy that map, clones and receives start
# from a snapshot's. Every operation draws its choices from the one seeded
# generator, in a fixed order over sorted names, so a seed replays the same
# sequence as long as the daemon answers the same; what a kill -9 interrupted
# may differ by timing, and the model then takes whichever outcome it finds
# (if it is one of the allowed ones).

try:  # python3-libnbd: record I/O over NBD too
    import nbd
except ImportError:
    nbd = None

SUITES = ["aes-128-ccm", "aes-192-ccm", "aes-256-ccm", "aes-128-gcm", "aes-256-gcm"]
KEYFORMATS = ["raw", "hex", "passphrase"]
PROPS = {
    "compression": ["off", "on", "zstd", "zstd-3"],
    "checksum": ["on", "off"],
    "sync": ["standard", "always", "disabled"],
    "primarycache": ["all", "metadata", "none"],
}
ALIAS = {("compression", "on"): "zstd"}  # compression=on is shown as what it stands for
REC = 8192
DEADLINE = 120  # seconds for any wait on the daemon: generous on a loaded machine

# operation kinds and their default weights
WEIGHTS = {
    "write": 12, "create": 6, "create_child": 3, "destroy": 3, "destroy_r": 2, "destroy_R": 2,
    "set": 3, "inherit": 2, "snapshot": 6, "destroy_snap": 2, "destroy_range": 1,
    "rollback": 2, "clone": 4, "promote": 3, "send_full": 2, "send_incr": 2,
    "load_key": 2, "unload_key": 2, "change_key": 2, "scrub": 2, "offline": 2, "online": 2,
    "replace": 2, "attach": 2, "detach": 2, "clear": 1, "pool_add": 1, "export_import": 1,
    "rename": 2,
}
DISRUPTIONS = {
    "kill9": 5, "kill9_loss": 4, "term": 2, "stop_cont": 2, "export_loss": 1,
    "kill_scrub": 1, "kill_resilver": 1, "kill_receive": 1, "kill_create": 1,
    "fault_write": 1, "fault_read": 1, "fault_fsync": 1,
}


class Fail(Exception):
    pass


class Ds:
    """A dataset of the model: what the daemon must show and hold."""
    guids = 0

    def __init__(self, name, volsize, recsize=REC):
        self.name = name
        self.volsize = volsize
        self.recsize = recsize
        self.enc = "off"
        self.is_root = False
        self.key = None  # (keyformat, path) of an encryption root
        self.props = {}  # local properties
        self.origin = None  # "ds@snap"
        self.snaps = []  # [(name, id, data, volsize)], oldest first
        self.data = {}  # record number -> tuple of acceptable contents
        self.recv = None  # (source dataset, raw) of a received dataset
        self.key_loaded = False
        Ds.guids += 1
        self.guid = Ds.guids  # a raw receive keeps its source's

    def snap(self, name):
        for s in self.snaps:
            if s[0] == name:
                return s
        return None


class Soak:
    def __init__(self, args):
        self.a = args
        self.rng = random.Random(args.seed)
        self.work = tempfile.mkdtemp(prefix="coffer-soak.", dir=os.environ.get("TMPDIR", "/tmp"))
        self.state = os.path.join(self.work, "state")
        self.luns = os.path.join(self.work, "luns")
        self.keys = os.path.join(self.work, "keys")
        self.tmp = os.path.join(self.work, "tmp")
        for d in (self.luns, self.keys, self.tmp):
            os.makedirs(d)
        self.sock = os.path.join(self.work, "sock")
        self.conf = os.path.join(self.work, "cofferd.conf")
        self.faultinj = args.faultinj
        self.faultctl = os.path.join(self.work, "faults")
        self.faultlog = os.path.join(self.work, "faults.log")
        self.armed = 0
        with open(self.conf, "w") as f:
            f.write("[cofferd]\nsocket = %s\nstate_dir = %s\nlog_level = info\n"
                    "log_target = stderr\nlun_search =\ntxg_timeout = 1\nscrub_rate = 4M\n"
                    % (self.sock, self.state))
            if self.faultinj:  # every LUN read a pread the shim can fail
                f.write("lun_mmap = no\n")
        if self.faultinj:
            self.arm("")
        self.log = open(os.path.join(self.work, "cofferd.log"), "ab")
        self.proc = None
        self.oplog = open(os.path.join(self.work, "ops.log"), "w")
        self.ds = {}
        self.pools = {}  # name -> {"vdevs": [[path, ...], ...], "offline": set(), "resilver": bool}
        self.n = 0
        self.opno = 0
        self.history = []
        self.stats = {}
        self.inflight = None
        self.nbdsock = os.path.join(self.work, "nbd.sock")

    # ---- the daemon ----

    def start(self):
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
        if self.faultinj:
            env.update(LD_PRELOAD=self.faultinj, COFFER_FAULT_CTL=self.faultctl,
                       COFFER_FAULT_LOG=self.faultlog,
                       ASAN_OPTIONS="verify_asan_link_order=0:detect_leaks=0")
        self.log.write(b"--- soak: start cofferd\n")
        self.log.flush()
        self.proc = subprocess.Popen([self.a.cofferd, "-f", "-c", self.conf], stdout=self.log,
                                     stderr=self.log, env=env, start_new_session=True)
        end = time.time() + DEADLINE
        while True:
            if self.proc.poll() is not None:
                raise Fail("cofferd did not start (exit %s)" % self.proc.returncode)
            r = subprocess.run([self.a.coffer, "-S", self.sock, "ping"], capture_output=True)
            if r.returncode == 0:
                return
            if time.time() > end:
                raise Fail("cofferd did not answer a ping in %d s" % DEADLINE)
            time.sleep(0.05)

    def signal(self, sig):
        self.proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            try:
                rc = self.proc.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                raise Fail("cofferd did not exit on signal %d" % sig)
            if sig == signal.SIGTERM and rc != 0:
                raise Fail("cofferd exited %d on SIGTERM" % rc)
            self.proc = None

    def alive(self):
        if self.proc is None or self.proc.poll() is not None:
            rc = None if self.proc is None else self.proc.returncode
            raise Fail("cofferd died (%s)" % ("signal %d" % -rc if rc is not None and rc < 0
                                                else "exit %s" % rc))

    def cof(self, *args, stdin=None, must=False, timeout=600):
        """Run coffer; returns (rc, stdout bytes, stderr text). must: a refusal fails the run."""
        argv = [self.a.coffer, "-S", self.sock] + [str(x) for x in args]
        if self.history and self.history[-1][1].endswith(" ..."):
            # name the command of the operation under way, should it never return
            self.history[-1] = (self.opno, self.history[-1][1].split(" ")[0] + " ... coffer "
                                + " ".join(str(x) for x in args) + " ...")
        try:
            r = subprocess.run(argv, input=stdin if isinstance(stdin, bytes) else None,
                               stdin=None if isinstance(stdin, bytes) or stdin is None else stdin,
                               capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Fail("coffer %s: no answer in %d s" % (" ".join(map(str, args)), timeout))
        err = r.stderr.decode(errors="replace").strip()
        if r.returncode != 0:
            self.alive()
            if must:
                raise Fail("coffer %s failed: %s" % (" ".join(map(str, args)), err))
        return r.returncode, r.stdout, err

    def json(self, *args):
        rc, out, err = self.cof("-j", *args, must=True)
        return json.loads(out)

    # ---- model helpers ----

    def note(self, desc):
        self.history.append((self.opno, desc))
        self.oplog.write("%d %s\n" % (self.opno, desc))
        self.oplog.flush()

    def count(self, what):
        self.stats[what] = self.stats.get(what, 0) + 1

    def pick(self, seq):
        seq = sorted(seq)
        return self.rng.choice(seq) if seq else None

    def newname(self, prefix):
        self.n += 1
        return "%s%d" % (prefix, self.n)

    def keyfile(self, fmt):
        path = os.path.join(self.keys, self.newname("key"))
        if fmt == "raw":
            b = bytes(self.rng.getrandbits(8) for _ in range(32))
        elif fmt == "hex":
            b = ("".join("%02x" % self.rng.getrandbits(8) for _ in range(32)) + "\n").encode()
        else:
            b = ("soak passphrase %d\n" % self.rng.getrandbits(48)).encode()
        with open(path, "wb") as f:
            f.write(b)
        return (fmt, path)

    def root_of(self, name):
        """The encryption root whose key name uses, or None when clear."""
        d = self.ds[name]
        if d.enc == "off":
            return None
        while name in self.ds:
            if self.ds[name].is_root:
                return name
            name = name.rsplit("/", 1)[0]
        return None

    def sync_of(self, name):
        """The sync property name has, set or inherited."""
        while name in self.ds:
            if "sync" in self.ds[name].props:
                return self.ds[name].props["sync"]
            name = name.rsplit("/", 1)[0]
        return "standard"

    def settle(self, names):
        """A commit made every write to names so far durable: the newest content stands."""
        for n in names:
            d = self.ds[n]
            d.data = {r: v[-1:] for r, v in d.data.items()}

    def loaded(self, name):
        r = self.root_of(name)
        return r is None or self.ds[r].key_loaded

    def children(self, name):
        return [n for n in self.ds if n.startswith(name + "/")]

    def clones_of(self, full):
        return [n for n, d in self.ds.items() if d.origin == full]

    def all_snaps(self, names):
        return ["%s@%s" % (n, s[0]) for n in names for s in self.ds[n].snaps]

    def pool_of(self, name):
        return name.split("/")[0].split("@")[0]

    def datasets(self, pool=None, need_key=False):
        return [n for n in self.ds if (pool is None or self.pool_of(n) == pool)
                and (not need_key or self.loaded(n))]

    # ---- operations; each returns a description, applies its result to the model ----

    def op_write(self, name=None):
        name = name or self.pick(self.datasets(need_key=True))
        if not name:
            return None
        d = self.ds[name]
        nrec = d.volsize // d.recsize
        rec = self.rng.randrange(nrec)
        cnt = min(self.rng.choice([1, 1, 2, 4]), nrec - rec)
        payload = self.rng.randbytes(cnt * d.recsize)
        if self.rng.random() < 0.2:  # compressible records too
            payload = bytes([self.rng.getrandbits(8)]) * len(payload)
        desc = "write %s -o %d (%d records)" % (name, rec * d.recsize, cnt)
        if nbd and self.rng.random() < 0.3:
            desc = "nbd " + desc
            rc, err = self.nbd_io(name, rec * d.recsize, payload)
        else:
            rc, _, err = self.cof("write", name, "-o", rec * d.recsize, stdin=payload)
        for i in range(cnt):
            new = payload[i * d.recsize:(i + 1) * d.recsize]
            if rc == 0 and self.sync_of(name) != "disabled":
                d.data[rec + i] = (new,)
            elif rc == 0:  # a flush does nothing: durable at the next commit
                d.data[rec + i] = tuple(x for x in d.data.get(rec + i, (None,))
                                        if x != new) + (new,)
            else:  # a failed write may have applied part of its requests
                d.data[rec + i] = d.data.get(rec + i, (None,)) + (new,)
        if rc != 0:
            raise Fail("%s refused: %s" % (desc, err))
        return desc

    def make_ds(self, name, parent):
        vol = self.rng.choice([128, 256, 512]) * 1024
        argv = ["create", "-s", "-V", vol]
        d = Ds(name, vol)
        enc_parent = parent in self.ds and self.ds[parent].enc != "off"
        if not enc_parent and self.rng.random() < 0.5:
            suite = self.rng.choice(SUITES)
            key = self.keyfile(self.rng.choice(KEYFORMATS))
            argv += ["-o", "encryption=" + suite, "-o", "keyformat=" + key[0],
                     "-o", "keylocation=file://" + key[1]]
            if key[0] == "passphrase":
                argv += ["-o", "pbkdf2iters=100000"]
            d.enc, d.is_root, d.key, d.key_loaded = suite, True, key, True
        elif enc_parent:
            d.enc = self.ds[parent].enc
        if self.rng.random() < 0.3:
            p = self.pick(PROPS)
            v = self.rng.choice(PROPS[p])
            argv += ["-o", "%s=%s" % (p, v)]
            d.props[p] = v
        return argv + [name], d

    def op_create(self, child=False):
        pool = self.pick(self.pools)
        parent = pool
        if child:
            parent = self.pick([n for n in self.datasets(pool) if n.count("/") < 3])
            if not parent:
                return None
        if parent in self.ds and not self.loaded(parent):
            return None
        name = parent + "/" + self.newname("d")
        argv, d = self.make_ds(name, parent)
        self.cof(*argv, must=True)
        self.ds[name] = d
        return " ".join(map(str, argv))

    def op_create_child(self):
        return self.op_create(child=True)

    def destroy_set(self, name, flag):
        """What destroy [flag] name removes, or None when it must be refused."""
        sub = [name] + self.children(name)
        if flag == "":
            if self.children(name) or self.ds[name].snaps:
                return None
            return [name]
        if flag == "-r":
            if any(self.clones_of(s) for s in self.all_snaps(sub)):
                if not all(c in sub for s in self.all_snaps(sub) for c in self.clones_of(s)):
                    return None
            return sub
        # -R: the clones of every snapshot, and theirs, go too
        out = list(sub)
        i = 0
        while i < len(out):
            for s in self.all_snaps([out[i]]):
                for c in self.clones_of(s):
                    for x in [c] + self.children(c):
                        if x not in out:
                            out.append(x)
            i += 1
        return out

    def key_blocks(self, gone):
        """Does a dataset of @gone leave the list of encrypted children of a
        parent that stays, whose key is not loaded? That list is changed
        under the parent's key (dataset.c), so the destroy is refused; a
        received dataset not yet in its parent's list is not, so the model
        allows either."""
        for n in gone:
            parent = n.rsplit("/", 1)[0]
            if (self.ds[n].enc != "off" and parent in self.ds and parent not in gone
                    and self.ds[parent].enc != "off" and not self.loaded(parent)):
                return True
        return False

    def related(self):
        """Datasets in a clone relation: clones, and datasets whose snapshots have clones."""
        return [n for n, d in self.ds.items()
                if d.origin or any(self.clones_of(s) for s in self.all_snaps([n]))]

    def op_destroy(self, flag=""):
        rel = self.related()
        if flag == "-R" and rel and self.rng.random() < 0.5:
            name = self.pick(rel)
        else:
            name = self.pick(self.ds)
        if not name:
            return None
        gone = self.destroy_set(name, flag)
        desc = "destroy %s%s" % (flag + " " if flag else "", name)
        argv = ["destroy"] + ([flag] if flag else []) + [name]
        rc, _, err = self.cof(*argv)
        if rc == 0:
            if gone is None:
                raise Fail("%s succeeded; the model says it must be refused" % desc)
            for g in gone:
                self.ds.pop(g, None)
        elif gone is not None and flag == "-R" and not (
                self.key_blocks(gone) and "is not loaded" in err):
            raise Fail("%s refused: %s" % (desc, err))
        else:
            desc += " (refused)"
        return desc

    def op_destroy_r(self):
        return self.op_destroy("-r")

    def op_destroy_R(self):
        return self.op_destroy("-R")

    def op_set(self):
        name = self.pick(self.ds)
        if not name:
            return None
        d = self.ds[name]
        if self.rng.random() < 0.2:
            vol = d.volsize + d.recsize * self.rng.choice([1, 16])
            self.cof("set", "volsize=%d" % vol, name, must=True)
            d.volsize = vol
            return "set volsize=%d %s" % (vol, name)
        p = self.pick(PROPS)
        v = self.rng.choice(PROPS[p])
        self.cof("set", "%s=%s" % (p, v), name, must=True)
        d.props[p] = v
        return "set %s=%s %s" % (p, v, name)

    def op_inherit(self):
        name = self.pick(self.ds)
        if not name:
            return None
        p = self.pick(PROPS)
        r = self.rng.random() < 0.3
        self.cof("inherit", *(["-r"] if r else []), p, name, must=True)
        for n in [name] + (self.children(name) if r else []):
            self.ds[n].props.pop(p, None)
        return "inherit %s%s %s" % ("-r " if r else "", p, name)

    def op_snapshot(self):
        name = self.pick(self.datasets(need_key=True))
        if not name:
            return None
        r = self.rng.random() < 0.2
        snap = self.newname("s")
        subs = [name] + (self.children(name) if r else [])
        if not all(self.loaded(n) for n in subs):
            return None
        self.cof("snapshot", *(["-r"] if r else []), "%s@%s" % (name, snap), must=True)
        for n in subs:
            self.settle([n])  # the snapshot's commit makes every write before it durable
            self.n += 1
            self.ds[n].snaps.append((snap, self.n, dict(self.ds[n].data), self.ds[n].volsize))
        return "snapshot %s%s@%s" % ("-r " if r else "", name, snap)

    def op_destroy_snap(self, rng=False):
        full = self.pick(self.all_snaps(self.ds))
        if not full:
            return None
        name, snap = full.split("@")
        d = self.ds[name]
        idx = [s[0] for s in d.snaps].index(snap)
        if rng:
            last = self.rng.randrange(idx, len(d.snaps))
            gone = d.snaps[idx:last + 1]
            target = "%s@%s%%%s" % (name, snap, d.snaps[last][0])
        else:
            gone = [d.snaps[idx]]
            target = full
        R = self.rng.random() < 0.3
        names = {s[0] for s in gone}
        # -R implies -r, as in zfs: the descendants' snapshots of those names go too
        subs = [name] + (self.children(name) if R else [])
        fulls = ["%s@%s" % (n, x[0]) for n in subs for x in self.ds[n].snaps if x[0] in names]
        clones = [c for f in fulls for c in self.clones_of(f)]
        rc, _, err = self.cof("destroy", *(["-R"] if R else []), target)
        desc = "destroy %s%s" % ("-R " if R else "", target)
        if rc != 0:
            return desc + " (refused)"
        if clones and not R:
            raise Fail("%s succeeded; it has clones %s" % (desc, clones))
        for c in clones:
            for x in self.destroy_set(c, "-R") if c in self.ds else []:
                self.ds.pop(x, None)
        for n in subs:
            if n in self.ds:
                self.ds[n].snaps = [x for x in self.ds[n].snaps if x[0] not in names]
        return desc

    def op_destroy_range(self):
        return self.op_destroy_snap(rng=True)

    def op_rollback(self):
        full = self.pick(self.all_snaps(self.datasets(need_key=True)))
        if not full:
            return None
        name, snap = full.split("@")
        d = self.ds[name]
        idx = [s[0] for s in d.snaps].index(snap)
        r = self.rng.random() < 0.5
        newer = d.snaps[idx + 1:]
        rc, _, err = self.cof("rollback", *(["-r"] if r else []), full)
        desc = "rollback %s%s" % ("-r " if r else "", full)
        if rc != 0:
            if not newer:
                raise Fail("%s refused: %s" % (desc, err))
            return desc + " (refused)"
        if newer and not r:
            raise Fail("%s succeeded over newer snapshots" % desc)
        if any(self.clones_of("%s@%s" % (name, s[0])) for s in newer):
            raise Fail("%s destroyed snapshots with clones" % desc)
        d.snaps = d.snaps[:idx + 1]
        d.data = dict(d.snaps[idx][2])  # volsize stays the dataset's
        return desc

    def op_clone(self):
        full = self.pick(self.all_snaps(self.datasets(need_key=True)))
        if not full:
            return None
        name, snap = full.split("@")
        src = self.ds[name]
        root = self.root_of(name)
        parent = root if root else self.pool_of(name)
        cname = parent + "/" + self.newname("c")
        self.cof("clone", full, cname, must=True)
        c = Ds(cname, src.snap(snap)[3], src.recsize)
        c.enc = src.enc
        c.origin = full
        c.data = dict(src.snap(snap)[2])
        self.ds[cname] = c
        return "clone %s %s" % (full, cname)

    def op_promote(self):
        clones = sorted(n for n, d in self.ds.items() if d.origin and self.loaded(n))
        name = self.pick(clones)
        if not name:
            return None
        c = self.ds[name]
        oname, osnap = c.origin.split("@")
        o = self.ds[oname]
        idx = [s[0] for s in o.snaps].index(osnap)
        moved = o.snaps[:idx + 1]
        if {s[0] for s in moved} & {s[0] for s in c.snaps}:
            return None
        rc, _, err = self.cof("promote", name)
        desc = "promote %s" % name
        if rc != 0:
            return desc + " (refused: %s)" % err
        o.snaps = o.snaps[idx + 1:]
        c.snaps = moved + c.snaps
        for s in moved:
            for x in self.clones_of("%s@%s" % (oname, s[0])):
                if x != name:
                    self.ds[x].origin = "%s@%s" % (name, s[0])
        c.origin, o.origin = o.origin, "%s@%s" % (name, osnap)
        return desc

    def op_rename(self):
        """A snapshot to a new name, or a dataset to a new name beside it: its
        descendants, their snapshots and the origins of clones follow."""
        if self.rng.random() < 0.5:
            full = self.pick(self.all_snaps(self.ds))
            if not full:
                return None
            name, snap = full.split("@")
            new = self.newname("m")
            rc, _, err = self.cof("rename", full, "@" + new)
            desc = "rename %s @%s" % (full, new)
            if rc != 0:
                raise Fail("%s refused: %s" % (desc, err))
            d = self.ds[name]
            d.snaps = [(new,) + s[1:] if s[0] == snap else s for s in d.snaps]
            for x in self.clones_of(full):
                self.ds[x].origin = "%s@%s" % (name, new)
            return desc
        name = self.pick(n for n in self.ds if "/" in n)
        if not name:
            return None
        new = name.rsplit("/", 1)[0] + "/" + self.newname("n")
        rc, _, err = self.cof("rename", name, new)
        desc = "rename %s %s" % (name, new)
        if rc != 0:
            raise Fail("%s refused: %s" % (desc, err))

        def moved(n):
            return new + n[len(name):] if n == name or n.startswith(name + "/") else n

        for n in sorted(self.ds):
            if moved(n) != n:
                d = self.ds.pop(n)
                d.name = moved(n)
                self.ds[d.name] = d
        for d in self.ds.values():
            if d.origin:
                o, s = d.origin.split("@")
                d.origin = "%s@%s" % (moved(o), s)
            if d.recv:
                d.recv = (moved(d.recv[0]), d.recv[1])
        return desc

    def op_send_full(self):
        full = self.pick(self.all_snaps(self.ds))
        if not full:
            return None
        name, snap = full.split("@")
        src = self.ds[name]
        raw = src.enc != "off" and (self.rng.random() < 0.5 or not self.loaded(name))
        if not raw and not self.loaded(name):
            return None
        pools = sorted(self.pools)
        dst = pools[(pools.index(self.pool_of(name)) + 1) % len(pools)]
        tname = dst + "/" + self.newname("r")
        stream = os.path.join(self.tmp, "stream")
        with open(stream, "wb") as f:
            r = subprocess.run([self.a.coffer, "-S", self.sock, "send"] + (["-w"] if raw else [])
                               + [full], stdout=f, stderr=subprocess.PIPE)
        desc = "send %s%s | receive %s" % ("-w " if raw else "", full, tname)
        if r.returncode != 0:
            self.alive()
            err = r.stderr.decode().strip()
            if raw and "not supported" in err:  # coffer(8): no raw send of clones yet
                return desc + " (send refused: %s)" % err
            raise Fail("send %s failed: %s" % (full, err))
        with open(stream, "rb") as f:
            rc, _, err = self.cof("receive", tname, stdin=f)
        if rc != 0:
            if raw and any(d.guid == src.guid for n, d in self.ds.items()
                           if self.pool_of(n) == dst):
                return desc + " (refused: one copy per GUID)"
            if raw and self.side_out(dst) and "waits for the resilver" in err:
                return desc + " (refused: %s)" % err  # coffer(8): it waits for the resilver
            raise Fail("%s refused: %s" % (desc, err))
        self.ds[tname] = self.received(tname, name, snap, raw)
        return desc

    def received(self, tname, name, snap, raw):
        src = self.ds[name]
        s = src.snap(snap)
        t = Ds(tname, s[3], src.recsize)
        t.data = dict(s[2])
        t.snaps = [(snap, s[1], dict(s[2]), s[3])]
        t.recv = (name, raw)
        if raw:
            t.guid = src.guid
            root = self.ds[self.root_of(name)]
            t.enc, t.is_root, t.key, t.key_loaded = src.enc, True, root.key, False
            t.props["keylocation"] = "prompt"
        return t

    def op_send_incr(self):
        cands = []
        for n, t in sorted(self.ds.items()):
            if not t.recv or not t.snaps or t.recv[0] not in self.ds:
                continue
            src = self.ds[t.recv[0]]
            ids = [s[1] for s in src.snaps]
            if t.snaps[-1][1] in ids and ids.index(t.snaps[-1][1]) < len(ids) - 1:
                cands.append(n)
        tname = self.pick(cands)
        if not tname:
            return None
        t = self.ds[tname]
        src = self.ds[t.recv[0]]
        raw = t.recv[1]
        if not raw and not self.loaded(src.name):
            return None
        ids = [s[1] for s in src.snaps]
        i = ids.index(t.snaps[-1][1])
        j = self.rng.randrange(i + 1, len(ids))
        frm, to = src.snaps[i][0], src.snaps[j][0]
        stream = os.path.join(self.tmp, "stream")
        with open(stream, "wb") as f:
            r = subprocess.run([self.a.coffer, "-S", self.sock, "send"] + (["-w"] if raw else [])
                               + ["-i", "@" + frm, "%s@%s" % (src.name, to)],
                               stdout=f, stderr=subprocess.PIPE)
        desc = "send %s-i @%s %s@%s | receive -F %s" % ("-w " if raw else "", frm, src.name,
                                                        to, tname)
        if r.returncode != 0:
            self.alive()
            return desc + " (send refused: %s)" % r.stderr.decode().strip()
        with open(stream, "rb") as f:
            rc, _, err = self.cof("receive", "-F", tname, stdin=f)
        if rc != 0:
            return desc + " (refused: %s)" % err
        s = src.snaps[j]
        t.data = dict(s[2])
        t.snaps.append((to, s[1], dict(s[2]), t.volsize))
        return desc

    def op_load_key(self):
        roots = [n for n, d in self.ds.items() if d.is_root and not d.key_loaded]
        name = self.pick(roots)
        if not name:
            return None
        self.cof("load-key", "-L", "file://" + self.ds[name].key[1], name, must=True)
        self.ds[name].key_loaded = True
        return "load-key %s" % name

    def op_unload_key(self):
        roots = [n for n, d in self.ds.items() if d.is_root and d.key_loaded]
        name = self.pick(roots)
        if not name:
            return None
        self.cof("unload-key", name, must=True)
        self.ds[name].key_loaded = False
        return "unload-key %s" % name

    def op_change_key(self):
        encd = [n for n in self.datasets(need_key=True) if self.ds[n].enc != "off"
                and not self.ds[n].recv]
        name = self.pick(encd)
        if not name:
            return None
        key = self.keyfile(self.rng.choice(KEYFORMATS))
        argv = ["change-key", "-o", "keyformat=" + key[0], "-o", "keylocation=file://" + key[1]]
        if key[0] == "passphrase":
            argv += ["-o", "pbkdf2iters=100000"]
        rc, _, err = self.cof(*argv, name)
        desc = "change-key keyformat=%s %s" % (key[0], name)
        if rc != 0:
            return desc + " (refused: %s)" % err
        d = self.ds[name]
        d.is_root, d.key, d.key_loaded = True, key, True
        return desc

    # pool operations

    def sides(self, pool):
        return [s for v in self.pools[pool]["vdevs"] for s in v]

    def newlun(self, size=None):
        path = os.path.join(self.luns, self.newname("l"))
        if size:
            with open(path, "wb") as f:
                f.truncate(size)
        return path

    def op_scrub(self):
        pool = self.pick(self.pools)
        rc, _, err = self.cof("pool", "scrub", pool)
        return "pool scrub %s%s" % (pool, "" if rc == 0 else " (refused: %s)" % err)

    def op_offline(self):
        cands = [(p, s) for p in self.pools for v in self.pools[p]["vdevs"]
                 if len([x for x in v if x not in self.pools[p]["offline"]]) >= 2
                 for s in v if s not in self.pools[p]["offline"]]
        if not cands:
            return None
        pool, side = self.rng.choice(sorted(cands))
        rc, _, err = self.cof("pool", "offline", pool, side)
        desc = "pool offline %s %s" % (pool, side)
        if rc != 0:
            return desc + " (refused: %s)" % err
        self.pools[pool]["offline"].add(side)
        return desc

    def op_online(self):
        cands = [(p, s) for p in self.pools for s in self.pools[p]["offline"]]
        if not cands:
            return None
        pool, side = self.rng.choice(sorted(cands))
        self.cof("pool", "online", pool, side, must=True)
        self.pools[pool]["offline"].discard(side)
        self.pools[pool]["resilver"] = True
        return "pool online %s %s" % (pool, side)

    def op_replace(self):
        cands = [(p, s) for p in self.pools for v in self.pools[p]["vdevs"] if len(v) >= 2
                 for s in v]
        if not cands:
            return None
        pool, side = self.rng.choice(sorted(cands))
        new = self.newlun()
        rc, _, err = self.cof("pool", "replace", pool, side, new)
        desc = "pool replace %s %s %s" % (pool, side, new)
        if rc != 0:
            return desc + " (refused: %s)" % err
        for v in self.pools[pool]["vdevs"]:
            if side in v:
                v[v.index(side)] = new
        self.pools[pool]["offline"].discard(side)
        self.pools[pool]["resilver"] = True
        return desc

    def op_attach(self):
        cands = [(p, s) for p in self.pools for v in self.pools[p]["vdevs"] if len(v) < 3
                 for s in v]
        if not cands:
            return None
        pool, side = self.rng.choice(sorted(cands))
        new = self.newlun(os.path.getsize(side))
        rc, _, err = self.cof("pool", "attach", pool, side, new)
        desc = "pool attach %s %s %s" % (pool, side, new)
        if rc != 0:
            return desc + " (refused: %s)" % err
        for v in self.pools[pool]["vdevs"]:
            if side in v:
                v.append(new)
        self.pools[pool]["resilver"] = True
        return desc

    def op_detach(self):
        cands = [(p, s) for p in self.pools for v in self.pools[p]["vdevs"] if len(v) >= 2
                 for s in v]
        if not cands:
            return None
        pool, side = self.rng.choice(sorted(cands))
        rc, _, err = self.cof("pool", "detach", pool, side)
        desc = "pool detach %s %s" % (pool, side)
        if rc != 0:
            return desc + " (refused: %s)" % err
        for v in self.pools[pool]["vdevs"]:
            if side in v:
                v.remove(side)
        self.pools[pool]["offline"].discard(side)
        return desc

    def op_clear(self):
        pool = self.pick(self.pools)
        self.cof("pool", "clear", pool, must=True)
        return "pool clear %s" % pool

    def op_pool_add(self):
        pool = self.pick(self.pools)
        if len(self.sides(pool)) >= 8:
            return None
        mirror = self.rng.random() < 0.5
        news = [self.newlun() for _ in range(2 if mirror else 1)]
        argv = ["pool", "add", "-s", "32M", pool] + (["mirror"] if mirror else []) + news
        self.cof(*argv, must=True)
        self.pools[pool]["vdevs"].append(news)
        return " ".join(argv)

    def op_export_import(self):
        pool = self.pick(self.pools)
        self.cof("pool", "export", pool, must=True)
        self.settle(self.datasets(pool))
        d = self.rng.random() < 0.5
        self.cof("pool", "import", *(["-d", self.luns] if d else []), pool, must=True)
        self.reload_keys(pool)
        self.check()
        return "pool export %s; pool import %s%s" % (pool, "-d DIR " if d else "", pool)

    # ---- disruptions ----

    def reload_keys(self, pool=None):
        for n, d in sorted(self.ds.items()):
            if pool and self.pool_of(n) != pool:
                continue
            if d.is_root:
                d.key_loaded = False
        for n, d in sorted(self.ds.items()):
            if (pool is None or self.pool_of(n) == pool) and d.is_root:
                self.cof("load-key", "-L", "file://" + d.key[1], n, must=True)
                d.key_loaded = True

    def restart(self, loss=False):
        self.note("restart" + (": state directory deleted, pool import -d" if loss else ""))
        if loss:
            shutil.rmtree(self.state, ignore_errors=True)
        self.start()
        for p in self.pools.values():
            p["resilver"] = True  # a side that missed writes catches up after the restart
        if loss:
            for p in sorted(self.pools):
                self.cof("pool", "import", "-d", self.luns, p, must=True)
        self.reload_keys()

    def arm(self, rules):
        """Give the fault shim its rules ("" disarms); it rereads the file when its mtime moves."""
        with open(self.faultctl + ".tmp", "w") as f:
            f.write(rules + "\n")
        os.rename(self.faultctl + ".tmp", self.faultctl)
        self.armed = max(time.time_ns(), self.armed + 1000000)
        os.utime(self.faultctl, ns=(self.armed, self.armed))

    def injected(self):
        try:
            with open(self.faultlog) as f:
                return sum(1 for _ in f)
        except OSError:
            return 0

    def fault(self, kind):
        """One side of a mirror fails its I/O for a while: nothing may be lost or refused."""
        cands = []
        for pool in sorted(self.pools):
            p = self.wait_scan(pool)
            for v in p["vdevs"][pool]["vdevs"].values():
                on = sorted(c["path"] for c in v.get("vdevs", {}).values()
                            if c.get("state") == "ONLINE")
                if len(on) >= 2 and v.get("state") == "ONLINE":
                    cands += [(pool, x) for x in on]
        if not cands or not self.faultinj:
            return
        pool, side = self.rng.choice(cands)
        op = {"write": "write", "fsync": "fsync",
              "read": self.rng.choice(["read", "short_read"])}[kind]
        rule = "path=%s;op=%s;err=EIO;after=%d;count=%d" % (
            os.path.basename(side), op, self.rng.randrange(4), self.rng.choice([1, 4, -1]))
        self.note("fault: " + rule)
        before = self.injected()
        self.arm(rule)
        names = self.datasets(pool, need_key=True)
        for _ in range(self.rng.randrange(3, 10)):
            name = self.pick(names)
            if not name:
                break
            self.note(self.op_write(name) + " (under the fault)")
        for n in names:
            self.verify(n, self.ds[n].data, self.ds[n].volsize)
        self.arm("")
        self.stats["faults_injected"] = self.stats.get("faults_injected", 0) + \
            self.injected() - before
        # a side a failed write or flush took out of service comes back by online
        self.cof("pool", "clear", pool, must=True)
        j = self.json("pool", "status", pool)["pools"][pool]
        for v in j["vdevs"][pool]["vdevs"].values():
            for c in v.get("vdevs", {}).values():
                if c.get("state") == "FAULTED":
                    self.note("pool online %s %s (after the fault)" % (pool, c["path"]))
                    self.cof("pool", "online", pool, c["path"], must=True)

    def maybe_loss(self):
        """Whether a kill -9 also loses the state directory (never --without kill9_loss)."""
        return self.rng.random() < 0.3 and "kill9_loss" not in self.a.without

    def background(self, argv, stdin=None):
        return subprocess.Popen([self.a.coffer, "-S", self.sock] + [str(x) for x in argv],
                                stdin=stdin,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill_soon(self, bg=None):
        time.sleep(self.rng.random() * 0.5)
        self.signal(signal.SIGKILL)
        if bg:
            bg.wait()

    def disrupt(self, kind):
        self.count("disrupt_" + kind)
        if kind == "kill9":
            self.signal(signal.SIGKILL)
            self.restart()
        elif kind == "kill9_loss":
            self.signal(signal.SIGKILL)
            self.restart(loss=True)
        elif kind == "term":
            self.settle(self.ds)
            self.signal(signal.SIGTERM)
            self.restart()
        elif kind == "stop_cont":
            self.proc.send_signal(signal.SIGSTOP)
            time.sleep(self.rng.random() * 0.5)
            self.proc.send_signal(signal.SIGCONT)
        elif kind == "export_loss":
            for p in sorted(self.pools):
                self.cof("pool", "export", p, must=True)
            self.settle(self.ds)
            self.signal(signal.SIGTERM)
            self.restart(loss=True)
        elif kind == "kill_scrub":
            self.cof("pool", "scrub", self.pick(self.pools))
            self.kill_soon()
            self.restart(loss=self.maybe_loss())
        elif kind == "kill_resilver":
            # the resilver of an attach, or of a replace when attach is left out
            d = (self.op_replace() if "attach" in self.a.without else self.op_attach()) or ""
            self.note(d + " (then kill -9)")
            self.kill_soon()
            self.restart(loss=self.maybe_loss())
        elif kind == "kill_receive":
            self.kill_inflight("receive")
        elif kind == "kill_create":
            self.kill_inflight("create")
        elif kind.startswith("fault_"):
            self.fault(kind[len("fault_"):])
        self.check()

    def kill_inflight(self, what):
        """kill -9 while a create or a receive runs: after the restart, whole or absent."""
        pool = self.pick(self.pools)
        full = self.pick(self.all_snaps(self.datasets(need_key=True)))
        if what == "receive" and full:
            name, snap = full.split("@")
            raw = self.ds[name].enc != "off"
            stream = os.path.join(self.tmp, "stream")
            with open(stream, "wb") as f:
                r = subprocess.run([self.a.coffer, "-S", self.sock, "send"]
                                   + (["-w"] if raw else []) + [full], stdout=f,
                                   stderr=subprocess.PIPE)
            if r.returncode != 0:
                self.alive()
                if not (raw and b"not supported" in r.stderr):
                    raise Fail("send %s failed: %s" % (full, r.stderr.decode().strip()))
                raw = False  # no raw send of clones yet: a plain one
                with open(stream, "wb") as f:
                    subprocess.run([self.a.coffer, "-S", self.sock, "send", full], stdout=f,
                                   stderr=subprocess.DEVNULL, check=False)
            tname = pool + "/" + self.newname("r")
            f = open(stream, "rb")
            bg = self.background(["receive", tname], stdin=f)
            cand = lambda: self.received(tname, name, snap, raw)
        else:
            tname = pool + "/" + self.newname("d")
            argv, d = self.make_ds(tname, pool)
            bg = self.background(argv[:])
            cand = lambda: d
            f = None
        self.note("%s %s (then kill -9)" % (what, tname))
        self.kill_soon(bg)
        if f:
            f.close()
        self.restart(loss=self.maybe_loss())
        names = {x["name"] for x in self.list_all()}
        if bg.returncode == 0 and tname not in names:
            raise Fail("%s %s acknowledged before the kill, missing after" % (what, tname))
        if tname in names:
            self.ds[tname] = cand()
            if self.ds[tname].is_root:
                self.cof("load-key", "-L", "file://" + self.ds[tname].key[1], tname, must=True)
                self.ds[tname].key_loaded = True

    # ---- the invariants ----

    def list_all(self):
        out = []
        j = self.json("list", "-p", "-t", "all", "-o", "name,volsize,encryption,origin")
        for name, v in j.get("datasets", {}).items():
            if name in self.pools:  # the pool's root dataset
                continue
            props = v.get("properties", {})
            out.append({"name": name,
                        **{k: p.get("value") for k, p in props.items()}})
        return out

    def check(self):
        self.alive()
        self.count("checks")
        for p in sorted(self.pools):
            self.check_pool(p)
        have = {x["name"]: x for x in self.list_all()}
        want = set(self.ds) | set(self.all_snaps(self.ds))
        missing = sorted(want - set(have))
        extra = sorted(set(have) - want)
        if missing or extra:
            raise Fail("datasets differ from the model: missing %s, unexpected %s"
                       % (missing, extra))
        for n, d in sorted(self.ds.items()):
            h = have[n]
            if int(h["volsize"]) != d.volsize:
                raise Fail("%s: volsize %s, model %d" % (n, h["volsize"], d.volsize))
            if h["encryption"] != d.enc:
                raise Fail("%s: encryption %s, model %s" % (n, h["encryption"], d.enc))
            if (h.get("origin") or "-") != (d.origin or "-"):
                raise Fail("%s: origin %s, model %s" % (n, h.get("origin"), d.origin))
        self.check_props()
        for n, d in sorted(self.ds.items()):
            if not self.loaded(n):
                continue
            self.verify(n, d.data, d.volsize)
            for s in d.snaps:
                if self.rng.random() < 0.3:
                    self.verify("%s@%s" % (n, s[0]), s[2], s[3])
        for p in sorted(self.pools):
            rc, out, err = self.cof("pool", "check", p)
            if rc != 0:
                raise Fail("pool check %s: %s %s" % (p, out.decode(errors="replace")[-2000:], err))

    def check_props(self):
        names = sorted(self.ds)
        if not names:
            return
        j = self.json("get", "-p", "-s", "local", ",".join(PROPS), *names)
        have = {}
        for name, v in j.get("datasets", {}).items():
            for k, p in v.get("properties", {}).items():
                have.setdefault(name, {})[k] = p.get("value")
        for n in names:
            want = {k: ALIAS.get((k, v), v) for k, v in self.ds[n].props.items() if k in PROPS}
            got = have.get(n, {})
            if got != want:
                raise Fail("%s: local properties %s, model %s" % (n, got, want))

    def wait_scan(self, pool):
        end = time.time() + DEADLINE * 2
        while True:
            j = self.json("pool", "status", pool)
            p = j["pools"][pool]
            scan = p.get("scan") or {}
            states = []

            def walk(v):
                states.append(v.get("state"))
                for c in v.get("vdevs", {}).values():
                    walk(c)
            walk(p.get("vdevs", {}).get(pool, {}))
            if (scan.get("function") != "resilver" or scan.get("state") != "scanning") \
                    and "RESILVERING" not in states:
                return p
            if time.time() > end:
                raise Fail("pool %s: resilver not done in %d s" % (pool, DEADLINE * 2))
            time.sleep(0.2)

    def side_out(self, pool):
        """A side may be out of service: offline, or resilvering since the last check."""
        return bool(self.pools[pool]["offline"]) or self.pools[pool].get("resilver", False)

    def check_pool(self, pool):
        p = self.wait_scan(pool)
        m = self.pools[pool]
        m["resilver"] = False
        want = "DEGRADED" if m["offline"] else "ONLINE"
        got = p.get("state")
        if got != want:
            raise Fail("pool %s is %s, model %s: %s" % (pool, got, want, self.sides_said(pool)))
        have = sorted(sorted(self.vdev_paths(v)) for v in p["vdevs"][pool]["vdevs"].values())
        model = sorted(sorted(v) for v in m["vdevs"])
        if have != model:
            raise Fail("pool %s: vdevs %s, model %s" % (pool, have, model))

    def sides_said(self, pool):
        """Each LUN's state as pool status -j gives it, and why when it is not ONLINE."""
        rc, out, err = self.cof("pool", "status", "-j", pool)
        try:
            luns = json.loads(out)["pools"][pool]
        except ValueError:
            return err
        said = []

        def walk(v):
            if "path" in v:
                said.append("%s %s%s" % (os.path.basename(v["path"]), v.get("state"),
                                         " (%s)" % v["absent"] if v.get("absent") else ""))
            for c in v.get("vdevs", {}).values():
                walk(c)
        walk(luns.get("vdevs", {}).get(pool, {}))
        rc, out, _ = self.cof("pool", "status", pool)
        return "; ".join(said) + "\n" + out.decode(errors="replace")

    def vdev_paths(self, v):
        if "path" in v:
            return [v["path"]]
        return [c["path"] for c in v.get("vdevs", {}).values()]

    def nbd_io(self, name, off, payload=None, length=0):
        """A write (flushed) or a read over NBD: (0, bytes) or (1, error text)."""
        self.count("nbd_writes" if payload else "nbd_reads")
        h = nbd.NBD()
        try:
            h.connect_uri("nbd+unix:///%s?socket=%s" % (name, self.nbdsock))
            if payload is None:
                out = h.pread(length, off) if length else b""
            else:
                h.pwrite(payload, off)
                h.flush()
                out = b""
            h.shutdown()
            return 0, out
        except nbd.Error as e:
            self.alive()
            return 1, str(e)

    def verify(self, name, data, volsize):
        self.count("verify_reads")
        if nbd and self.rng.random() < 0.3:
            rc, out = self.nbd_io(name, 0, length=volsize)
            err = out if rc else ""
        else:
            rc, out, err = self.cof("read", name, "-l", volsize)
        if rc != 0:
            raise Fail("read %s: %s" % (name, err))
        if len(out) != volsize:
            raise Fail("read %s: %d bytes, volsize %d" % (name, len(out), volsize))
        rs = self.ds[name.split("@")[0]].recsize
        zero = bytes(rs)
        for r in range(volsize // rs):
            got = out[r * rs:(r + 1) * rs]
            ok = data.get(r, (None,))
            match = [x for x in ok if got == (x if x is not None else zero)]
            if not match:
                raise Fail("%s: record %d reads other than acknowledged" % (name, r))
            if "@" not in name and len(ok) > 1:
                data[r] = tuple(match[:1])  # what the crash left is what must read from now on
            self.count("records_verified")

    # ---- the run ----

    def setup(self):
        self.start()
        a, b, c = self.newlun(), self.newlun(), self.newlun()
        self.cof("pool", "create", "-s", "64M", "sa", "mirror", a, b, must=True)
        self.cof("pool", "create", "-s", "64M", "sb", c, must=True)
        self.pools = {"sa": {"vdevs": [[a, b]], "offline": set()},
                      "sb": {"vdevs": [[c]], "offline": set()}}
        for _ in range(2):
            self.op_create()

    def choose(self, table):
        kinds = sorted(k for k in table if k not in self.a.without and self.weight(k, table) > 0)
        total = sum(self.weight(k, table) for k in kinds)
        x = self.rng.random() * total
        for k in kinds:
            x -= self.weight(k, table)
            if x < 0:
                return k
        return kinds[-1] if kinds else None

    def weight(self, k, table):
        return self.a.weights.get(k, table[k])

    def run(self):
        self.setup()
        end = time.time() + self.a.seconds if self.a.seconds else None
        while True:
            if end is None and self.opno >= self.a.ops:
                break
            if end is not None and time.time() > end:
                break
            self.opno += 1
            kind = self.choose(WEIGHTS)
            if kind is None:
                break
            self.history.append((self.opno, kind + " ..."))
            desc = getattr(self, "op_" + kind)()
            self.history.pop()
            self.note(desc or (kind + " (nothing to do)"))
            if desc:
                self.count(kind)
            self.alive()
            if self.rng.random() < self.a.disrupt:
                d = self.choose(DISRUPTIONS)
                if d:
                    self.note("disrupt: " + d)
                    self.disrupt(d)
            if not self.a.quiet and self.opno % 25 == 0:
                print("soak: seed %d: %d operations" % (self.a.seed, self.opno), flush=True)
        self.signal(signal.SIGKILL)
        self.restart()
        self.check()
        self.signal(signal.SIGTERM)

    def cleanup(self, keep):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if keep:
            print("soak: files kept in %s" % self.work, file=sys.stderr)
        else:
            shutil.rmtree(self.work, ignore_errors=True)


def parse(argv):
    import argparse
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(prog="soak", add_help=False)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--ops", type=int, default=200)
    ap.add_argument("--minutes", type=float, default=0)
    ap.add_argument("--hours", type=float, default=0)
    ap.add_argument("--without", default="")
    ap.add_argument("--weight", default="")
    ap.add_argument("--disrupt", type=float, default=0.08)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--shrink", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--discard", action="store_true")  # shrink's trial runs: keep nothing
    ap.add_argument("--list-kinds", action="store_true")
    ap.add_argument("-h", "--help", action="store_true")
    try:
        a = ap.parse_args(argv)
    except SystemExit:
        sys.exit(2)
    if a.help:
        print(__doc__)
        sys.exit(0)
    if a.list_kinds:
        print("operations: " + " ".join(sorted(WEIGHTS)))
        print("disruptions: " + " ".join(sorted(DISRUPTIONS)))
        sys.exit(0)
    a.seconds = a.minutes * 60 + a.hours * 3600
    if a.seed is None:
        a.seed = int.from_bytes(os.urandom(4), "little")
    a.without = {k for k in a.without.split(",") if k}
    a.weights = {}
    for kv in (x for x in a.weight.split(",") if x):
        k, _, v = kv.partition("=")
        a.weights[k] = float(v)
    for k in a.without | set(a.weights):
        if k not in WEIGHTS and k not in DISRUPTIONS:
            print("soak: unknown kind %s (see --list-kinds)" % k, file=sys.stderr)
            sys.exit(2)

    def binary(var, rel, name):
        if os.environ.get(var):
            return os.environ[var]
        for p in (os.path.join(os.getcwd(), rel), os.path.join(here, "..", "..", rel)):
            if os.access(p, os.X_OK):
                return os.path.abspath(p)
        return shutil.which(name)
    a.faultinj = binary("COFFER_FAULTINJ", "tests/fault/faultinj.so", "faultinj.so")
    a.cofferd = binary("COFFERD", "daemon/cofferd", "cofferd")
    a.coffer = binary("COFFER", "client/coffer", "coffer")
    if not a.cofferd or not a.coffer:
        print("soak: no cofferd or coffer (set COFFERD and COFFER)", file=sys.stderr)
        sys.exit(77)
    return a


def main(argv):
    a = parse(argv)
    # the client exits on an error with its connection allocated: not this soak's business
    os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=0")
    s = Soak(a)
    print("soak: seed %d, work dir %s" % (a.seed, s.work), flush=True)
    failed = None
    t0 = time.time()
    try:
        s.run()
    except Fail as e:
        failed = str(e)
    except Exception:  # a fault of the driver: keep the files all the same
        import traceback
        failed = "driver error:\n" + traceback.format_exc()
    if failed:
        print("soak: FAILED: seed %d, operation %d: %s" % (a.seed, s.opno, failed),
              file=sys.stderr)
        print("soak: the operation: %s" % (s.history[-1][1] if s.history else "setup"),
              file=sys.stderr)
        print("soak: the last operations:", file=sys.stderr)
        for no, d in s.history[-30:]:
            print("  %5d  %s" % (no, d), file=sys.stderr)
        print("soak: replay with: soak.py --seed %d --ops %d%s" % (
            a.seed, s.opno, " " + " ".join(argv_repro(a)) if argv_repro(a) else ""),
            file=sys.stderr)
        try:
            with open(os.path.join(s.work, "cofferd.log"), "rb") as f:
                log = f.read().decode(errors="replace")
            sans = [x for x in log.splitlines() if "ERROR: AddressSanitizer" in x
                    or "runtime error:" in x]
            print("soak: cofferd.log ends:\n" + "\n".join(sans[:3] + [log[-3000:]]),
                  file=sys.stderr)
        except OSError:
            pass
    print("soak: seed %d: %d operations in %.0f s; %s" % (
        a.seed, s.opno, time.time() - t0,
        " ".join("%s=%d" % kv for kv in sorted(s.stats.items()))), flush=True)
    s.cleanup(keep=a.keep or (failed is not None and not a.discard))
    if failed and a.shrink:
        shrink(a, s, failed)
    return 1 if failed else 0


def signature(msg):
    """What kind of failure msg is, without the names and numbers of this run."""
    msg = re.sub(r"\S*[/@]\S*", "N", msg.splitlines()[0] if msg else "")
    return re.sub(r"\d+", "#", msg)[:48]


def shrink(a, s, failed):
    """Leave out each kind the failing run used, in turn; keep out those it fails without.

    A kind left out changes every later choice of the seed's sequence, so this
    looks for the fewest kinds (and operations) that still show the failure, not
    for a subsequence of the run."""
    want = signature(failed)
    used = sorted({k for k in s.stats if k in WEIGHTS}
                  | {k[len("disrupt_"):] for k in s.stats if k.startswith("disrupt_")})
    without, ops, best = set(a.without), s.opno, None
    print("soak: shrink: seed %d, %d operations, %d kinds; failure \"%s\""
          % (a.seed, ops, len(used), want), flush=True)
    for k in used:
        argv = [sys.executable, os.path.abspath(__file__), "--seed", str(a.seed),
                "--ops", str(max(ops * 2, 20)), "--quiet", "--discard",
                "--without", ",".join(sorted(without | {k}))] + argv_repro(a, without=False)
        r = subprocess.run(argv, capture_output=True, text=True)
        m = re.search(r"FAILED: seed \d+, operation (\d+): (.*)", r.stderr)
        if r.returncode == 1 and m and signature(m.group(2)) == want:
            without.add(k)
            ops = int(m.group(1))
            best = r.stderr
            print("soak: shrink: fails without %s too, at operation %d" % (k, ops), flush=True)
        else:
            print("soak: shrink: %s is needed" % k, flush=True)
    print("soak: shrink: shortest: soak.py --seed %d --ops %d --without %s %s"
          % (a.seed, ops, ",".join(sorted(without)), " ".join(argv_repro(a, without=False))))
    if best:
        print(best[best.find("soak: the last operations:"):best.find("soak: replay")], end="")


def argv_repro(a, without=True):
    out = []
    if a.without and without:
        out += ["--without", ",".join(sorted(a.without))]
    if a.weights:
        out += ["--weight", ",".join("%s=%g" % kv for kv in sorted(a.weights.items()))]
    if a.disrupt != 0.08:
        out += ["--disrupt", "%g" % a.disrupt]
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
