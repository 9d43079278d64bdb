#!/usr/bin/perl
# A worker frozen inside the zone's lock (stopped by gdb in rl_decide, which
# runs under it) must not stop a reload: the master takes no zone lock, so
# it starts new workers at once.  Killed there, the worker leaves a zone that
# nginx unlocks and the next worker uses as it stands: a spent key still
# refused, a fresh key given exactly its limit.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use File::Temp qw(tempdir);
use Time::HiRes qw(sleep time);
use RLTest;

plan skip_all => 'gdb is not installed (./build.sh test installs it)' unless grep { -x "$_/gdb" } split /:/, $ENV{PATH};

my $t = RLTest->new->start(<<'EOF');
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        ratelimit zone=z key=$http_x_key limit=5 period=1h;
    }
}
EOF

is($t->statuses('/index.html', 6, { 'X-Key' => 'spent' }), '200 200 200 200 200 429', 'a key spends its 5');

my ($worker) = $t->worker_pids;
my $dir = tempdir(CLEANUP => 1);

# gdb stops the worker at rl_check, inside the lock, and holds it there
my $gdb = fork() // die "fork: $!";
if ($gdb == 0) {
    open(STDOUT, '>', "$dir/gdb.log");
    open(STDERR, '>&', \*STDOUT);
    exec('gdb', '-p', $worker, '-batch', '-ex', 'break rl_decide', '-ex', 'continue',
         '-ex', "shell touch $dir/stopped", '-ex', 'shell sleep 600') or POSIX::_exit(127);
}
RLTest::wait_until(sub { RLTest::read_file("$dir/gdb.log") =~ /Breakpoint 1 at/ }, 30)
    or BAIL_OUT('gdb did not attach: ' . RLTest::read_file("$dir/gdb.log"));

# a request walks into the breakpoint
my $client = RLTest::spawn(sub { $t->get('/index.html', { 'X-Key' => 'caught' })->{status} });
ok(RLTest::wait_until(sub { -e "$dir/stopped" }, 30), 'the worker is stopped inside the zone lock');

# reload: the master must start a new worker at once
my $start = time;
my $started = $t->reload_started(1);
ok($started, sprintf('reload with a worker frozen in the lock: a new worker in %.1f s', time - $start));
like($t->error_log, qr/reconfiguring/, 'the master reloaded');

# kill the frozen worker: nginx releases the lock it held
kill 'KILL', $worker;
kill 'KILL', $gdb;
waitpid($gdb, 0);
$client->wait;
ok(RLTest::wait_until(sub { !grep { $_ == $worker } $t->worker_pids }, 10), 'the frozen worker is gone');
like($t->error_log, qr/worker process $worker exited on signal 9/, 'the master reaped it');

is($t->get('/index.html', { 'X-Key' => 'spent' })->{status}, 429, 'the key spent before is still refused');
is($t->statuses('/index.html', 6, { 'X-Key' => 'fresh' }), '200 200 200 200 200 429', 'a fresh key gets exactly its 5');

like($t->error_log, qr/\[alert\].*shared memory zone "z" was locked by $worker/, 'the master unlocked its zone');

# the crash is the test's, not the module's: the harness would flag it
$t->forget_kills([$worker], locked => 1);
$t->stop();
done_testing();
