//! The command forms of the project's CLI.md that tarn implements, each parsed by the clap tree
//! as written there, so that a renamed flag, a flag made to take a value, or a positional
//! argument moved fails here rather than in a user's script. CLI.md lives outside the
//! repository: its forms are copied here, each as the line of CLI.md it comes from and one or
//! more commands that spell it out (every optional part present in one of them). A form added
//! to CLI.md, or implemented, belongs here too.

use clap::Parser;

use super::Cli;

/// (the form as CLI.md writes it, commands that spell it out).
const FORMS: &[(&str, &[&str])] = &[
    // Pools (zpool).
    (
        "pool create [-f] [-s SIZE] [-R ALTROOT] [-m MOUNTPOINT] [-o prop=val]... [-O fsprop=val]... POOL VDEVSPEC...",
        &[
            "pool create tank /d/a",
            "pool create -f -s 2G -R /alt -m /mnt -o feature@log_spacemap=disabled -o cachefile=none -O compression=lz4 -O atime=off tank /d/a /d/b",
            "pool create tank mirror /d/a /d/b mirror /d/c /d/d",
        ],
    ),
    (
        "pool import [-d DIR]... [-f] [-F [-n]] [-R ALTROOT] [-o readonly=on] [-a | POOL|GUID [NEWNAME]]",
        &[
            "pool import",
            "pool import -d /d -d /e",
            "pool import -d /d -f -F -n -R /alt -o readonly=on tank",
            "pool import -d /d -f -R /alt -o readonly=on 1234567890 other",
            "pool import -a",
            "pool import -d /d -f -R /alt -o readonly=on -a",
        ],
    ),
    ("pool export [-f] POOL", &["pool export tank", "pool export -f tank"]),
    ("pool sync [POOL]", &["pool sync", "pool sync tank"]),
    ("pool clear POOL [DEV]", &["pool clear tank", "pool clear tank /d/a"]),
    ("pool destroy [-f] POOL", &["pool destroy tank", "pool destroy -f tank"]),
    (
        "pool list [-H] [-p] [-j] [-o name,size,alloc,free,frag,cap,health] [POOL]",
        &[
            "pool list",
            "pool list -H -p -o name,size,alloc,free,frag,cap,health tank",
            "pool list -j tank",
        ],
    ),
    (
        "pool status [-v] [-j] [POOL]",
        &["pool status", "pool status -v tank", "pool status -j tank"],
    ),
    (
        "pool get [-H] [-p] [-o ...] PROP[,PROP]|all POOL",
        &[
            "pool get all tank",
            "pool get -H -p -o name,property,value,source size,free tank",
            "pool get feature@log_spacemap tank",
        ],
    ),
    ("pool set PROP=VAL POOL", &["pool set feature@embedded_data=enabled tank"]),
    (
        "pool upgrade [-a | POOL]",
        &["pool upgrade", "pool upgrade tank", "pool upgrade -a"],
    ),
    (
        "pool wait -t free|scrub|resilver POOL",
        &[
            "pool wait -t free tank",
            "pool wait -t scrub tank",
            "pool wait -t resilver tank",
            "pool wait -t raidz_expand tank",
            "pool wait tank",
        ],
    ),
    ("pool history POOL", &["pool history tank"]),
    (
        "pool scrub [-s|-p] POOL",
        &["pool scrub tank", "pool scrub -s tank", "pool scrub -p tank"],
    ),
    (
        "pool iostat [-l] [-w] [-q] [-v] [-H] [-p] [-y] [POOL] [INTERVAL [COUNT]]",
        &[
            "pool iostat",
            "pool iostat -l -w -q -v -H -p -y tank 1 2",
            "pool iostat tank 1",
            "pool iostat 1 2",
        ],
    ),
    (
        "pool attach|detach|replace|add|online|offline ...   as zpool (add: also `log DEV`, `cache DEV`)",
        &[
            "pool attach tank /d/a /d/b",
            "pool detach tank /d/b",
            "pool replace tank /d/a /d/c",
            "pool replace tank /d/a",
            "pool add tank /d/e",
            "pool add tank mirror /d/e /d/f",
            "pool add tank log /d/log",
            "pool add tank cache /d/cache",
            "pool online tank /d/a",
            "pool offline tank /d/a",
        ],
    ),
    (
        "pool attach POOL raidzN-M NEWDEV  RAID-Z expansion; pool wait -t raidz_expand POOL",
        &[
            "pool attach tank raidz1-0 /d/f",
            "pool attach -f -w tank raidz2-1 /d/g",
            "pool wait -t raidz_expand tank",
            "pool wait -t raidz_expand,scrub tank",
        ],
    ),
    // Datasets (zfs).
    (
        "create [-p] [-o prop=val]... FS",
        &["create tank/a", "create -p -o compression=zstd -o atime=off tank/a/b"],
    ),
    (
        "destroy [-r] [-R] [-n] [-v] FS|FS@SNAP[%SNAP]",
        &[
            "destroy tank/a",
            "destroy -r -R -n -v tank/a",
            "destroy tank/a@s1",
            "destroy tank/a@s1%s3",
        ],
    ),
    (
        "rename FS|FS@SNAP NEWNAME",
        &["rename tank/a tank/b", "rename tank/a@s1 tank/a@s2"],
    ),
    (
        "list [-H] [-p] [-j] [-r] [-t filesystem,snapshot,all] [-o name,used,avail,refer,mountpoint,...] [DATASET]",
        &[
            "list",
            "list -H -p -r -t filesystem,snapshot,all -o name,used,avail,refer,mountpoint tank",
            "list -j tank",
        ],
    ),
    (
        "get [-H] [-p] [-j] [-o name,property,value,source] PROP[,PROP]|all DATASET...",
        &[
            "get all tank",
            "get -H -p -o name,property,value,source used,available tank tank/a",
            "get -j compression tank",
        ],
    ),
    ("set PROP=VAL DATASET", &["set compression=zstd-3 tank/a"]),
    ("inherit PROP DATASET", &["inherit compression tank/a"]),
    (
        "get -r|-d N|-s SOURCES|-t TYPES ...; tarn set P=V [P=V]... DS; tarn inherit -r P DS",
        &[
            "get -r compression tank",
            "get -d 1 -s local,inherited -t filesystem,snapshot -H -p -o name,value all tank",
            "set compression=lz4 atime=off com.example:note=x tank/a",
            "inherit -r compression tank",
        ],
    ),
    (
        "list -d N -s PROP -S PROP ...; tarn pool status -x",
        &[
            "list -d 1 -s used -S name -t all tank",
            "list -r -S used -o name,used tank",
            "pool status -x",
            "pool status -x tank",
        ],
    ),
    (
        "set module:name=value DS          user properties, inherited, shown with their source",
        &["set com.sun:auto-snapshot=false tank/a", "inherit com.sun:auto-snapshot tank/a"],
    ),
    (
        "mount [FS [MOUNTPOINT]] | tarn mount -a",
        &["mount", "mount tank/a", "mount tank/a /mnt/a", "mount -a"],
    ),
    (
        "unmount FS|MOUNTPOINT | tarn unmount -a",
        &["unmount tank/a", "unmount /mnt/a", "unmount -a"],
    ),
    (
        "snapshot [-r] FS@SNAP...",
        &["snapshot tank/a@s1", "snapshot -r tank/a@s1 tank/b@s1"],
    ),
    (
        "rollback [-r] FS@SNAP",
        &["rollback tank/a@s1", "rollback -r tank/a@s1"],
    ),
    (
        "clone [-o prop=val]... FS@SNAP FS",
        &[
            "clone tank/a@s1 tank/c",
            "clone -o compression=lz4 -o atime=off tank/a@s1 tank/c",
        ],
    ),
    ("promote CLONE", &["promote tank/c"]),
    ("bookmark FS@SNAP FS#BOOKMARK", &["bookmark tank/a@s1 tank/a#b1"]),
    (
        "hold [-r] TAG FS@SNAP...          user holds; release [-r] TAG FS@SNAP...; holds [-r] [-H] [-p] FS@SNAP...",
        &[
            "hold keep tank/a@s1",
            "hold -r keep tank/a@s1 tank/b@s1",
            "release keep tank/a@s1",
            "release -r keep tank/a@s1 tank/b@s1",
            "holds tank/a@s1",
            "holds -r -H -p tank/a@s1 tank/b@s1",
        ],
    ),
    (
        "allow [-u USER|-g GROUP|-e] [-l] [-d] PERM[,PERM]... DS; tarn unallow ...; tarn allow DS   delegation",
        &[
            "allow tank/a",
            "allow -u alice snapshot tank/a",
            "allow -u alice,bob -g staff -e -l -d create,snapshot,mount,compression tank/a",
            "allow -g staff -d mount tank/a",
            "allow -e send tank",
            "unallow -u alice tank/a",
            "unallow -u alice -g staff -e -l -d snapshot,mount tank/a",
        ],
    ),
    (
        "diff [-F] [-H] [-t] [-h] FS@SNAP [FS@SNAP|FS]   M / + / - / R lines, as zfs diff",
        &[
            "diff tank/a@s1",
            "diff tank/a@s1 tank/a@s2",
            "diff -F -H -t -h tank/a@s1 tank/a",
            "diff -FHth tank/a@s1 @s2",
        ],
    ),
    (
        "destroy -d FS@SNAP                deferred destroy: the snapshot goes with its last hold and clone",
        &["destroy -d tank/a@s1", "destroy -d -r tank/a@s1%s3"],
    ),
    (
        // -t continues a receive, naming no snapshot (the token names it), as zfs send -t.
        "send [-R] [-i|-I SNAP|#BM] [-c] [-n] [-v] [-P] [-t TOKEN] FS@SNAP",
        &[
            "send tank/a@s2",
            "send -R -i tank/a@s1 -c -n -v -P tank/a@s2",
            "send -I @s1 tank/a@s2",
            "send -i #b1 tank/a@s2",
            "send -nP tank/a@s2",
            "send -v -P -t 1-abc",
        ],
    ),
    (
        "receive [-F] [-s] [-u] [-v] [-o prop=val] [-x prop] FS | -A FS",
        &[
            "receive tank/b",
            "receive -F -s -u -v -o compression=lz4 -x atime tank/b",
            "receive -A tank/b",
            "recv tank/b",
        ],
    ),
    // Inspection (zdb, arcstat).
    (
        "debug metaslabs [-m|-mm|-mmm] [-j] POOL",
        &[
            "debug metaslabs tank",
            "debug metaslabs -m tank",
            "debug metaslabs -mm tank",
            "debug metaslabs -mmm -j tank",
        ],
    ),
    ("debug spacemap POOL VDEV MS", &["debug spacemap tank 0 3"]),
    (
        "debug map [-o FILE.svg|.png] POOL",
        &[
            "debug map tank",
            "debug map -o map.svg tank",
            "debug map -o map.png tank",
        ],
    ),
    (
        "debug object DATASET PATH|OBJECT",
        &["debug object tank/a /dir/file", "debug object tank/a 128"],
    ),
    ("debug dataset DATASET", &["debug dataset tank/a"]),
    ("check [-d DIR] POOL", &["check tank", "check -d /d tank"]),
    (
        "stat [-H] [-p] NAME [POOL] [INTERVAL [COUNT]]",
        &[
            "stat txgs",
            "stat -H -p txgs tank 1 2",
            "stat arc tank",
            "stat arc 1",
        ],
    ),
    ("stat --prometheus", &["stat --prometheus"]),
    // Other.
    (
        "daemon [--foreground]   TARN_SOCKET or --socket names its socket",
        &[
            "daemon",
            "daemon --foreground",
            "--socket /run/x.sock daemon",
            "daemon --socket /run/x.sock",
        ],
    ),
    ("quickstart [DIR]", &["quickstart", "quickstart /tmp/q"]),
    // Coming with the open issues: the forms of verbs tarn has.
    (
        "inject [-d DEV] [-e io|corrupt|delay|vanish] [-T read|write] [-f PERCENT] [-n COUNT] POOL",
        &[
            "inject tank",
            "inject -d /d/a -e corrupt -T read -f 50 -n 10 tank",
            "inject -e vanish tank",
        ],
    ),
    (
        "inject   lists active injections; tarn inject -c ID|all clears",
        &["inject", "inject -c 3", "inject -c all"],
    ),
    (
        "pool get feature@NAME POOL",
        &["pool get feature@log_spacemap tank"],
    ),
    ("pool get feature@* POOL", &["pool get feature@* tank"]),
    ("version", &["version"]),
    (
        "set quota=|refquota=|reservation=|refreservation=|userquota@USER=|groupquota@G=|projectquota@ID= DS",
        &[
            "set quota=10G tank/a",
            "set refquota=none tank/a",
            "set reservation=1G tank/a",
            "set refreservation=1G tank/a",
            "set userquota@alice=10G tank/a",
            "set userquota@1000=none tank/a",
            "set groupquota@staff=1T tank/a",
            "set projectquota@42=5G tank/a",
            "set userobjquota@alice=100000 tank/a",
            "set groupobjquota@100=none tank/a",
            "set projectobjquota@42=1000 tank/a",
        ],
    ),
    (
        "userspace|groupspace|projectspace [-H] [-p] [-o COLS] [-s COL] DS",
        &[
            "userspace tank/a",
            "userspace -H -p -o name,used -s used tank/a",
            "groupspace -H -p -o type,name,used,quota,objused,objquota -s name tank/a@s1",
            "projectspace -H -p -o name,used -s used tank/a",
            "userspace -n -j -s type -S used -t posixuser,posixgroup,smbuser,smbgroup,all tank/a",
            "groupspace -t all tank/a",
        ],
    ),
];

/// The `bench` forms (with the `bench` feature only).
#[cfg(feature = "bench")]
const BENCH_FORMS: &[(&str, &[&str])] = &[
    (
        "bench seqwrite|mount|clone-destroy|receive|frag|timeseries|workloads",
        &[
            "bench seqwrite",
            "bench mount",
            "bench clone-destroy",
            "bench receive",
            "bench frag",
            "bench timeseries",
            "bench workloads",
        ],
    ),
    (
        "bench run [fio-like job options] [--interval S --window N --max-time S --json F --chart F]",
        &["bench run --interval 1 --window 5 --max-time 30 --json out.json --chart out.svg"],
    ),
    (
        "bench steady --replay FILE [-j]",
        &["bench steady --replay series.json", "bench steady --replay series.json -j"],
    ),
];

fn parse(command: &str) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("tarn").chain(command.split_whitespace()))
}

fn check_forms(forms: &[(&str, &[&str])]) {
    let failures: Vec<String> = forms
        .iter()
        .flat_map(|(form, commands)| {
            commands.iter().filter_map(move |command| {
                parse(command).err().map(|error| {
                    format!("CLI.md form `tarn {form}`: `tarn {command}` does not parse:\n{error}")
                })
            })
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every implemented form of CLI.md parses as written.
#[test]
fn cli_md_forms_parse() {
    check_forms(FORMS);
    #[cfg(feature = "bench")]
    check_forms(BENCH_FORMS);
}

/// The check above can fail: a flag tarn does not have, or a missing operand, is refused.
#[test]
fn a_form_that_drifted_does_not_parse() {
    assert!(parse("pool export -x tank").is_err());
    assert!(parse("send -Q tank/a@s1").is_err());
    assert!(parse("debug spacemap tank 0").is_err());
}

/// The columns CLI.md names after `-o` are columns of their tables, so the forms also run.
#[test]
fn cli_md_columns_exist() {
    use tarn_protocol::rows::{GET_COLUMNS, LIST_COLUMNS, POOL_LIST_COLUMNS, USERSPACE_COLUMNS};
    for column in ["name", "size", "alloc", "free", "frag", "cap", "health"] {
        assert!(POOL_LIST_COLUMNS.contains(&column), "pool list -o {column}");
    }
    for column in ["name", "used", "avail", "refer", "mountpoint"] {
        assert!(LIST_COLUMNS.contains(&column), "list -o {column}");
    }
    for column in ["name", "property", "value", "source"] {
        assert!(GET_COLUMNS.contains(&column), "get -o {column}");
    }
    for column in ["type", "name", "used", "quota", "objused", "objquota"] {
        assert!(USERSPACE_COLUMNS.contains(&column), "userspace -o {column}");
    }
}

/// `userspace -s` and `-S` keep the order they were given in, each key sorting within the
/// ties of those before it (two separate lists would lose it).
#[test]
fn userspace_sort_keys_keep_their_order() {
    let keys_of = |command: &str| match parse(command).expect(command).command {
        crate::Command::Userspace(args)
        | crate::Command::Groupspace(args)
        | crate::Command::Projectspace(args) => args.sort.keys,
        _ => panic!("{command} is not a space verb"),
    };
    let keys = |list: &[(&str, bool)]| {
        list.iter()
            .map(|(field, descending)| (field.to_string(), *descending))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys_of("userspace -S used -s name -S type tank"),
        keys(&[("used", true), ("name", false), ("type", true)])
    );
    assert_eq!(
        keys_of("groupspace -s type -S used tank"),
        keys(&[("type", false), ("used", true)])
    );
    assert!(keys_of("projectspace tank").is_empty());
    assert!(parse("userspace -s tank").is_err(), "-s needs a field");
    assert!(parse("userspace").is_err(), "a dataset is named");
}

/// Options that the verb could not honour together are refused by the parser, not accepted
/// and ignored: send -t takes the stream's kind from the token (-c), receive -A reads no
/// stream (-u, -v, -F, -s, -o, -x), import -n is a rewind's dry run of one named pool.
#[test]
fn options_that_would_be_ignored_are_refused() {
    for command in [
        "send -c -t 1-abc",
        "send -i @a -t 1-abc",
        "receive -A -u tank/b",
        "receive -A -v tank/b",
        "receive -A -F tank/b",
        "pool import -F -n -a",
        "pool import -n tank",
    ] {
        assert!(parse(command).is_err(), "`tarn {command}` parses");
    }
}

/// `daemon --metrics`: a port alone listens on the loopback address only; an address is taken
/// as given; anything else is refused.
#[test]
fn metrics_takes_a_port_on_loopback_or_an_address() {
    let metrics_of = |command: &str| match parse(command).expect(command).command {
        crate::Command::Daemon { metrics, .. } => metrics.map(|addr| addr.to_string()),
        _ => panic!("{command} is not the daemon verb"),
    };
    assert_eq!(
        metrics_of("daemon --metrics 9134").as_deref(),
        Some("127.0.0.1:9134")
    );
    assert_eq!(
        metrics_of("daemon --metrics 0.0.0.0:9134").as_deref(),
        Some("0.0.0.0:9134")
    );
    assert_eq!(
        metrics_of("daemon --metrics [::1]:9134").as_deref(),
        Some("[::1]:9134")
    );
    assert!(parse("daemon --metrics localhost").is_err());
    assert!(parse("daemon --metrics 70000").is_err());
}
