#!/usr/bin/perl
# A zone's files in a directory the workers' user owns, with that user
# hostile: the master runs as root, the workers as nobody, and whatever
# nobody may do in the directory is done.  A FIFO at the state file's and
# the overrides file's names does not hold nginx's start (each refused with
# a line saying so, the zone starting empty); symbolic links planted at
# every temporary name a write could use (the master's and each worker's
# pid) to a root-only file are neither followed nor reused, so the file
# is intact after the workers' writes and the master's at its stop, and
# the files are regular ones; links planted at the files' own names are
# not followed at start (the root-only file is not read), and are
# replaced, not followed, by the next write.  nginx starts and stops within
# a second every time.  A directory the workers cannot write: each file's
# failing writes said once while they last, and their end with a count.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX qw(mkfifo);
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest qw(read_file write_file wait_until);

plan skip_all => 'needs root (the master as root, the workers as nobody)' unless $> == 0;
my (undef, undef, $uid, $gid) = getpwnam('nobody') or plan skip_all => 'no user nobody';
my $user = 'nobody ' . scalar getgrgid($gid);

my $t = RLTest->new();
my $p = $t->prefix;
chmod 0755, $p or die;   # the workers (nobody) serve its html/

my $dir = "$p/st";
mkdir $dir or die;
chown $uid, $gid, $dir or die;
my $state = "$dir/st.state";
my $over = "$dir/ov.txt";

# root's file, which nobody may not read or write
my $secret = "$p/secret";
write_file($secret, "root only\n");
chmod 0600, $secret or die;

my $conf = <<"EOF";
ratelimit_zone z 1m state=$state state_interval=1s overrides_file=$over;
server {
    listen 127.0.0.1:%%PORT%%;
    location / { ratelimit zone=z key=\$http_x_k limit=3 period=1h name=r; }
    location /rl/ { ratelimit_api write=on; }
}
EOF

# What nobody plants: made, then given to nobody (a link itself, lchown).
sub plant_fifo {
    my ($path) = @_;
    unlink $path;
    mkfifo($path, 0666) or die "mkfifo $path: $!";
    chown $uid, $gid, $path;
}

sub plant_link {
    my ($path, $to) = @_;
    unlink $path;
    symlink($to, $path) or die "symlink $path: $!";
    system('chown', '-h', "$uid:$gid", $path) == 0 or die;
}

# The start, timed from the clock: seconds, or undef if it did not listen
# (a master held at a FIFO is killed).
sub timed_start {
    my $at = time;
    my $ok = eval { $t->start($conf, workers => 2, user => $user); 1 };
    if (!$ok) {
        diag($@);
        $t->kill_server;
        return undef;
    }
    return time - $at;
}

sub timed_stop {
    my $at = time;
    $t->stop;
    return time - $at;
}

sub statuses {
    my ($key, $n) = @_;
    return join ' ', map { $t->get('/index.html', { 'X-K' => $key })->{status} } 1 .. $n;
}

# ---- a FIFO at each file's name ----

plant_fifo($state);
plant_fifo($over);

my $took = timed_start();
ok(defined $took && $took < 1, 'nginx starts within a second with a FIFO at state= and overrides_file= ('
   . ($took // 'never') . ' s)');
if (defined $took) {
    $t->log_like(qr/state file "\Q$state\E" is not a regular file: the zone starts empty/,
                 'the FIFO at state= refused, said');
    $t->log_like(qr/overrides_file "\Q$over\E" is not a regular file: the zone starts with no overrides/,
                 'the FIFO at overrides_file= refused, said');
} else {
    # held at the FIFO and killed: the rest without them
    unlink $state, $over;
    defined timed_start() or BAIL_OUT('nginx does not start');
}

# links at every name a temporary file of the old scheme took: FILE.tmp.PID
# of the master and of each worker, to root's file
my @pids = ($t->master_pid, $t->worker_pids);
is(scalar @pids, 3, 'a master and two workers');
for my $pid (@pids) {
    plant_link("$state.tmp.$pid", $secret);
    plant_link("$over.tmp.$pid", $secret);
}

is(statuses('a', 4), '200 200 200 429', 'a key spent');
is($t->request('PUT', '/rl/zones/z/overrides?key=b', {}, '{"action":"deny"}')->{status}, 200, 'an override set');
is(statuses('b', 1), '429', 'and applied');

ok(wait_until(sub { -f $over && !-l $over }, 5), 'the overrides file written, a regular file');
like(read_file($over), qr/\bb\b.*deny/, 'holding the override');
my $written = (stat $state)[9] // 0;
ok(wait_until(sub { -f $state && !-l $state && !-p $state }, 5), 'the state file written by worker 0, a regular file');

$took = timed_stop();
ok($took < 1, "nginx stops within a second ($took s)");
is(read_file($secret), "root only\n", "root's file intact after the workers' writes and the master's");
is((stat $secret)[2] & 07777, 0600, 'its mode too');
ok(-f $state && !-l $state, 'the state file a regular file after the stop');
for my $pid (@pids) {
    ok(-l "$state.tmp.$pid" && -l "$over.tmp.$pid", "the links planted for pid $pid left as they were");
}
is(scalar(grep { !-l } glob("$dir/*.tmp.*")), 0, 'no temporary file left behind');

# ---- the files read back: a directory of nobody's is no obstacle ----

$took = timed_start();
ok(defined $took && $took < 1, 'nginx starts within a second (' . ($took // 'never') . ' s)');
$t->log_like(qr/state file "\Q$state\E" of \d+ ms ago: [1-9]\d* keys restored/, 'the state file read');
$t->log_like(qr/1 overrides read from "\Q$over\E"/, 'the overrides file read');
is(statuses('a', 1), '429', 'the key spent still refused');
is(statuses('b', 1), '429', 'the override still applied');
$took = timed_stop();
ok($took < 1, "nginx stops within a second ($took s)");

# ---- links at the files' own names ----

plant_link($state, $secret);
plant_link($over, $secret);

$took = timed_start();
ok(defined $took && $took < 1, 'nginx starts within a second with links at state= and overrides_file= ('
   . ($took // 'never') . ' s)');
$t->log_like(qr/state file "\Q$state\E" is a symbolic link, which is not followed \(name the file itself\): the zone starts empty/,
             'the link at state= not followed, said');
$t->log_like(qr/overrides_file "\Q$over\E" is a symbolic link, which is not followed/,
             'the link at overrides_file= not followed, said');
is(statuses('b', 1), '200', 'nothing read through it');
is($t->request('PUT', '/rl/zones/z/overrides?key=c', {}, '{"action":"deny"}')->{status}, 200, 'an override set');
ok(wait_until(sub { -f $over && !-l $over }, 5), 'the overrides file written over the link, a regular file');
$took = timed_stop();
ok($took < 1, "nginx stops within a second ($took s)");
ok(-f $state && !-l $state, 'the state file written over the link, a regular file');
is(read_file($secret), "root only\n", "root's file intact");

# ---- a directory the workers cannot write ----

# each write that fails (every state_interval, every second for the
# overrides file) said once while it lasts; its end said with the count
my $ro = "$p/ro";
mkdir $ro or die;   # root's
$conf =~ s/\Q$dir\E/$ro/g;
defined timed_start() or BAIL_OUT('nginx does not start');
my $since = length $t->error_log;
is($t->request('PUT', '/rl/zones/z/overrides?key=d', {}, '{"action":"deny"}')->{status}, 200, 'an override set');
my %unwritten = (state => qr/state file "\Q$ro\E\/st.state" could not be written \(13: Permission denied\)/,
                 overrides => qr/overrides_file "\Q$ro\E\/ov.txt" could not be written \(13: Permission denied\)/);
ok(wait_until(sub { my $log = $t->error_log; !grep { $log !~ $_ } values %unwritten }, 5),
   'writes that fail are said, why too');
sleep 3.5;   # three more tries of each
for my $what (sort keys %unwritten) {
    my @n = substr($t->error_log, $since) =~ /$unwritten{$what}/g;
    is(scalar @n, 1, "the $what file's: once");
}
chown $uid, $gid, $ro or die;
my %again = (state => qr/state file "\Q$ro\E\/st.state" written again, after (\d+) writes that failed/,
             overrides => qr/overrides_file "\Q$ro\E\/ov.txt" written again, after (\d+) writes that failed/);
for my $what (sort keys %again) {
    my ($n) = $t->wait_log($again{$what}) =~ $again{$what};
    ok(($n // 0) >= 3, "the $what file written once the directory is the workers', said with the count (" . ($n // '?') . ')');
}
like(read_file("$ro/ov.txt"), qr/\bd\b.*deny/, 'the overrides file holds the override');
timed_stop();

done_testing();
