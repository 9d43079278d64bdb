#!/usr/bin/perl
# A local zone's key states kept across restarts and binary upgrades
# (ratelimit_zone state=FILE state_interval=TIME): a quota spent, a ban, a
# gcra key mid-burst, each the same after a graceful restart (the time
# nginx was down passing as for any idle key); after kill -9 of master and
# workers, what the last periodic write held; after a binary upgrade (USR2,
# WINCH, QUIT) under load, no key refreshed, the old generation's last
# spending included, the file's age said right; a damaged file and a file
# of another configuration said in the log, the zone starting empty or
# with what still applies; a directory where the file cannot be written
# said once while it lasts, and its end said with the count; state=
# refused on a Redis zone (one file for two zones: t/config_files.t).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest qw(read_file write_file wait_until);

my $t = RLTest->new();
my $p = $t->prefix;
my $file = "$p/z.state";

sub conf {
    my (%opt) = @_;
    my $quota = $opt{quota} // 'quota';
    my $interval = $opt{interval} // '1s';
    my $size = $opt{size} // '1m';
    my $gcra = $opt{no_gcra} ? '' : <<"EOF";
    location /gcra/ { ratelimit zone=z key=\$http_x_k limit=10 period=1000s name=gcra; alias %%PREFIX%%/html/; }
EOF
    return <<"EOF";
ratelimit_zone z $size state=$file state_interval=$interval;
server {
    listen 127.0.0.1:%%PORT%%;
    ratelimit_headers legacy;
    location /quota/ { ratelimit zone=z key=\$http_x_k algorithm=quota limit=3 reset=daily name=$quota; alias %%PREFIX%%/html/; }
    location /ban/ { ratelimit zone=z key=\$http_x_k limit=1 period=2s ban=1h name=ban; alias %%PREFIX%%/html/; }
$gcra}
EOF
}

sub hit {
    my ($path, $key) = @_;
    return $t->get($path, { 'X-K' => $key });
}

sub status { hit(@_)->{status} }

# nginx started as a daemon (not this process's child: a kill -9 leaves no
# child to reap, and a binary upgrade needs it, below); its master's pid.
sub start_daemon {
    my ($body, $nginx) = @_;
    my $text = $t->conf_text($body, workers => 2);
    $text =~ s/daemon off;/daemon on;/ or die;
    # nginx passes a new binary (USR2) only the environment `env` names
    $text = "env LD_PRELOAD;\n$text" if $ENV{RL_PRELOAD};
    write_file("$p/nginx.conf", $text);
    unlink "$p/nginx.pid";
    # as RLTest starts nginx: under the sanitizers, their runtime first
    local $ENV{LD_PRELOAD} = $ENV{RL_PRELOAD} if $ENV{RL_PRELOAD};
    system($nginx // $t->nginx, '-p', "$p/", '-c', "$p/nginx.conf", '-e', "$p/error.log") == 0 or die "nginx: $?";
    ok(wait_until(sub { (read_file("$p/nginx.pid") // '') =~ /^\d+/ && $t->get('/')->{status} != 599 }, 10),
       'nginx started as a daemon');
    my ($pid) = read_file("$p/nginx.pid") =~ /^(\d+)/;
    return $pid;
}

# Seconds to the next midnight UTC, from an instant.
sub to_midnight { my ($at) = @_; return 86400 - ($at - int($at / 86400) * 86400) }

# ---- a graceful restart ----

$t->start(conf(), workers => 2);

is(join(' ', map { status('/quota/f', 'alice') } 1 .. 4), '200 200 200 429', 'a daily quota of 3 spent');
is(join(' ', map { status('/ban/f', 'mallory') } 1 .. 2), '200 429', 'the ban rule refuses');
my $banned_at = time;
is(join(' ', map { status('/gcra/f', 'bob') } 1 .. 6), '200 200 200 200 200 200', 'six of gcra\'s ten spent');

$t->stop;
ok(-s $file, 'the master wrote the state file as it stopped');
sleep 1.5;   # down a while: no token of gcra (one a 100 s) comes back, the ban runs on
$t->start;
like($t->error_log, qr/ratelimit_zone "z": state file "\Q$file\E" of \d+ ms ago: [1-9]\d* keys restored/,
     'the start says what it restored');

my $before = time;
my $r = hit('/quota/f', 'alice');
my $after = time;
is($r->{status}, 429, 'the spent quota is still spent after a restart');
my $ra = $r->{headers}{'retry-after'};
ok($ra >= int(to_midnight($after)) && $ra <= int(to_midnight($before)) + 1,
   "its Retry-After is midnight UTC's ($ra s)");
is(status('/quota/f', 'carol'), 200, 'another key is not');

$r = hit('/ban/f', 'mallory');
my $left = 3600 - (time - $banned_at);
is($r->{status}, 429, 'the ban survives the restart');
ok($r->{headers}{'retry-after'} <= 3600 - 1 && $r->{headers}{'retry-after'} >= $left - 1,
   "its Retry-After counts the time nginx was down ($r->{headers}{'retry-after'} s)");

$r = hit('/gcra/f', 'bob');
is($r->{status}, 200, 'the gcra key mid-burst is admitted');
is($r->{headers}{'x-ratelimit-remaining'}, 3, 'with exactly what it had left, less this request');

# ---- kill -9 of master and workers: at most one interval lost ----

$t->stop;
$t->{pid} = start_daemon(conf());
is(join(' ', map { status('/quota/f', 'dave') } 1 .. 4), '200 200 200 429', 'another quota spent');
# worker 0 renamed two files since (the first may have been copied before)
my $ino = (stat $file)[1] // 0;
my $writes = 0;
ok(wait_until(sub { my $i = (stat $file)[1] // 0; $writes++, $ino = $i if $i != $ino; $writes >= 2 }, 10),
   'worker 0 wrote the file every state_interval');
my @pids = ($t->master_pid, $t->worker_pids);
kill 'KILL', @pids;
ok(wait_until(sub { !grep { kill 0, $_ } @pids }, 10), 'master and workers killed');
delete $t->{pid};
$t->write_conf(conf(), workers => 2);
$t->start;
is(status('/quota/f', 'dave'), 429, 'after kill -9, what the last periodic write held is kept');
is(status('/quota/f', 'alice'), 429, 'and what the write before it held');

# ---- a damaged file, a hostile file, a missing file ----

$t->stop;
my $data = read_file($file);
substr($data, length($data) / 2, 1) ^= "\x5a";
write_file($file, $data);
$t->start;
like($t->error_log, qr/state file "\Q$file\E" not read, damaged or truncated \(checksum\): the zone starts empty/,
     'a damaged file is said, and nginx starts');
is(status('/quota/f', 'alice'), 200, 'the zone started empty');

$t->stop;
write_file($file, "RLSTATE1" . ("\xff" x 4093));
$t->start;
like($t->error_log, qr/state file "\Q$file\E" not read, [^\n]*: the zone starts empty/, 'a hostile file too');
$t->stop;
unlink $file;
$t->start;
like($t->error_log, qr/state file "\Q$file\E" could not be opened: the zone starts empty \(2: /,
     'a missing file too');

# ---- another configuration: a rule renamed, one removed, another size ----

is(join(' ', map { status('/quota/f', 'erin') } 1 .. 4), '200 200 200 429', 'a quota spent');
is(join(' ', map { status('/ban/f', 'oscar') } 1 .. 2), '200 429', 'a ban begun');
$t->stop;
$t->write_conf(conf(quota => 'quota2', no_gcra => 1, size => '2m'), workers => 2);
$t->start;
like($t->error_log, qr/ratelimit_zone "z": state file "\Q$file\E": 2 of its 3 rules are not configured now \((gcra, quota|quota, gcra)\)/,
     'the rules gone are said by name');
is(status('/quota/f', 'erin'), 200, 'the renamed rule starts afresh');
is(status('/ban/f', 'oscar'), 429, 'the rule kept keeps its keys, in a zone of another size');

# ---- a binary upgrade under load ----

# nginx ignores USR2 in a master whose parent is the one it started with
# (the old master of an upgrade): started as a daemon, its parent is not
$t->stop;
unlink $file;
$t->{pid} = start_daemon(conf(interval => '1h'));
is(join(' ', map { status('/quota/f', 'u1') } 1 .. 4), '200 200 200 429', 'a quota spent');
is(join(' ', map { status('/quota/f', 'u2') } 1 .. 3), '200 200 200', 'another one spent just before USR2');

my $load = RLTest::spawn(sub {
    my $end = time + 6;
    while (time < $end) {
        HTTP::Tiny->new->get($t->url('/quota/f'), { headers => { 'X-K' => 'load' . int(rand(50)) } });
    }
    return 0;
});

# USR2 to the master $t runs, then WINCH once the new one runs: the new
# master's pid, once the old workers are gone
sub upgrade {
    my $old = $t->master_pid;
    my %old_workers = map { $_ => 1 } $t->worker_pids;
    kill 'USR2', $old;
    ok(wait_until(sub { -f "$p/nginx.pid.oldbin" && (read_file("$p/nginx.pid") // '') =~ /^(\d+)/ && $1 != $old }, 10),
       'USR2: a new master');
    my ($new) = read_file("$p/nginx.pid") =~ /^(\d+)/;
    kill 'WINCH', $old;
    ok(wait_until(sub { !grep { kill 0, $_ } keys %old_workers }, 10), 'WINCH: the old workers are gone');
    return $new;
}

my $old = $t->master_pid;
my $new = upgrade();
is(join(' ', map { status('/quota/f', "u$_") } 1 .. 2), '429 429',
   'the new generation refuses every key the old one spent');
kill 'QUIT', $old;
ok(wait_until(sub { !kill 0, $old }, 10), 'QUIT: the old master is gone');
delete $t->{pid};
$load->wait;
like($t->error_log, qr/the old generation wrote state file "\Q$file\E" in \d+ ms/,
     'the new master waited for the old generation\'s file');
# the file's age as the new master read it, by the clock of then (not of
# its start, before its wait)
my ($age) = $t->error_log =~ /the old generation wrote state file[^\n]*\n(?:.*\n)*?.*state file "\Q$file\E" of (-?\d+) ms ago/;
ok(defined $age && $age >= 0 && $age < 3000, 'the file\'s age it says is of the clock when it read it (' . ($age // '?') . ' ms)');
is(join(' ', map { status('/quota/f', "u$_") } 1 .. 2), '429 429', 'and still does once the old master is gone');

kill 'QUIT', $new;
ok(wait_until(sub { !kill 0, $new }, 10), 'the new master stopped');

# ---- a binary upgrade whose new binary starts late ----

# the old generation writes its file a quarter of a second after USR2 at
# most, before a new binary that starts a second late looks at it: that
# file is the one (nginx starts a new binary by the path it was started
# with, and sets NGINX for it)
my $late = "$p/nginx-late";
write_file($late, "#!/bin/bash\n[ -z \"\$NGINX\" ] || sleep 1\nexec -a \"\$0\" @{[ $t->nginx ]} \"\$@\"\n");
chmod 0755, $late or die;
unlink $file;
$t->{pid} = start_daemon(conf(interval => '1h'), $late);
is(join(' ', map { status('/quota/f', 'v1') } 1 .. 4), '200 200 200 429', 'a quota spent just before USR2');
my $from = length $t->error_log;
$old = $t->master_pid;
$new = upgrade();
my $log = substr($t->error_log, $from);
like($log, qr/the old generation wrote state file "\Q$file\E" in \d+ ms/,
     'the new master, started after the old generation wrote its file, takes it at once')
    or diag($log =~ /^.*binary upgrade.*$/mg);
is(status('/quota/f', 'v1'), 429, 'the new generation refuses the key');
kill 'QUIT', $old, $new;
ok(wait_until(sub { !kill(0, $old) && !kill(0, $new) }, 10), 'both masters stopped');
delete $t->{pid};

my @bad = grep { /\[(alert|emerg|crit)\]|exited on signal|AddressSanitizer|runtime error:/ } split /\n/, $t->error_log;
ok(!@bad, 'error log clean') or diag(join "\n", @bad);

# ---- a directory the file cannot be written in ----

# said once while it lasts, the failures counted; said again when it ends,
# with their count; said anew when it fails again
my $gone = "$p/gone";
my $unwritten = qr/state file "\Q$gone\E\/z.state" could not be written/;
$t->write_conf(conf() =~ s/state=\S+/state=$gone\/z.state/r, workers => 2);
$t->start;
my $since = length $t->error_log;
ok(wait_until(sub { $t->error_log =~ $unwritten }, 5), 'a write that fails is said');
sleep 4.5;   # four more intervals
my @lines = substr($t->error_log, $since) =~ /^.*$unwritten.*$/mg;
is(scalar @lines, 1, 'once, however often it fails') or diag(join "\n", @lines);
like($lines[0] // '', qr/\[error\].*could not be written \(2: No such file or directory\)$/, 'at error, saying why');
mkdir $gone or die;
ok(wait_until(sub { -f "$gone/z.state" }, 5), 'written once the directory is there');
my ($failed) = $t->wait_log(qr/state file "\Q$gone\E\/z.state" written again, after (\d+) writes that failed/)
    =~ /written again, after (\d+) writes that failed/;
ok(($failed // 0) >= 4, 'which is said, with the count of the writes that failed (' . ($failed // '?') . ')');
unlink "$gone/z.state";
rmdir $gone or die;
ok(wait_until(sub { my @n = substr($t->error_log, $since) =~ /$unwritten/g; @n == 2 }, 5),
   'failing again is said again');
$t->stop;

# ---- a Redis zone ----

$t->conf_refused("ratelimit_zone r 1m redis=127.0.0.1:6379 state=$p/r.state;\n",
                 qr/"state=" of zone "r" is for a zone without redis=: Redis keeps a Redis zone's keys/,
                 'state= on a Redis zone');
$t->conf_refused("ratelimit_zone s 1m state=$p/s.state state_interval=10ms;\n",
                 qr/invalid "state_interval=10ms" of zone "s": expected how often the state file is written/,
                 'a state_interval under a second');

done_testing();
