#!/usr/bin/perl
# redis_sync through Redis pauses (SIGSTOP, then SIGCONT): a call Redis does
# not answer within redis_timeout may still have reached it, and runs when
# Redis resumes, beside the copies sent again meanwhile.  Each call carries
# an id, and every copy after the first adds nothing: after pauses of
# 0.3 s (less than redis_timeout), 1 s and 4 s under steady requests, Redis
# holds exactly the units the servers admitted, key by key, for a
# fixed_window and a sliding_window rule (limit=1000 period=1h); the
# server then admits exactly the rest of the limit.  The same with two
# servers sharing the Redis.  An exchange's call waits for its reply
# longer than a request's redis_timeout (its own time: four intervals, at
# least a second): pauses of 0.6 s with the default redis_timeout of 50 ms
# fail no call and drop nothing.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use Time::HiRes qw(time sleep);
use RLTest;
use RLRedis;

my $redis = RLRedis->new->start;
my $rport = $redis->port;
my $timeout = 0.5;    # redis_timeout

# a window of fixed_window period=1h ends each hour: units spent in an
# interval before it and taken after it are never sent (their window is
# over), so the test runs within one hour's window
my $to_hour = 3600 - time % 3600;
if ($to_hour < 120) {
    diag(sprintf('waiting %.0f s for the next hour\'s window', $to_hour + 1));
    sleep $to_hour + 1;
}

# Each phase's locations have zones of their own (a Redis prefix each).
my ($zones, @locations) = ('');
for my $zone (qw(fw sw fw2 sw2 slow)) {
    my $algorithm = $zone =~ /^sw/ ? 'sliding_window buckets=10' : 'fixed_window';
    my $timeout = $zone eq 'slow' ? '' : ' redis_timeout=500ms';
    $zones .= "ratelimit_zone $zone 1m redis=127.0.0.1:$rport redis_prefix=$zone: redis_sync=100ms$timeout;\n";
    push @locations, "/$zone" => "ratelimit zone=$zone key=\$http_x_key algorithm=$algorithm limit=1000 period=1h name=w;";
}
my $conf = $zones . <<"EOF" . RLTest::locations(@locations) . "}\n";

server {
    listen 127.0.0.1:%%PORT%%;
    keepalive_requests 1000000;
    location = /stats { ratelimit_stats; }
EOF

my @servers = map { RLTest->new->start($conf, workers => 2) } 1 .. 2;
my @keys = qw(k1 k2 k3);

# One keep-alive connection to $port sending a request every 10 ms, the
# (path, key) pairs in turn from the $first, until the file $stop exists:
# for each "path key", [requests, admitted].  A response is read whole
# (its Content-Length) before the next request.
sub loader {
    my ($port, $stop, $first, @pairs) = @_;
    return sub {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port) or die "connect: $!\n";
        my ($i, %n) = ($first);
        until (-e $stop) {
            my ($path, $key) = @{ $pairs[ $i++ % @pairs ] };
            print $s "GET $path HTTP/1.1\r\nHost: t\r\nX-Key: $key\r\n\r\n";
            my $buf = '';
            sysread($s, $buf, 65536, length $buf) or die "read: $!\n" until $buf =~ /\r\n\r\n/;
            my ($head, $body) = split /\r\n\r\n/, $buf, 2;
            my ($len) = $head =~ /^Content-Length: (\d+)/mi;
            sysread($s, $body, 65536, length $body) or die "read: $!\n" while length $body < ($len // 0);
            my ($status) = $head =~ m{^HTTP/1\.1 (\d+)} or die "not HTTP: $head\n";
            $n{"$path $key"}[0]++;
            $n{"$path $key"}[1] += $status == 200 ? 1 : 0;
            sleep 0.01;
        }
        return \%n;
    };
}

# Steady requests to the servers (two connections each) over the paths'
# keys while Redis is paused for each of @pauses seconds in turn, a second
# of Redis running between two: the admitted units of each "path key".
sub under_pauses {
    my ($servers, $paths, @pauses) = @_;
    my $dir = tempdir(CLEANUP => 1);
    my @pairs = map { my $p = $_; map { [ $p, $_ ] } @keys } @$paths;
    my @kids = map {
        my $i = $_;
        RLTest::spawn(loader($servers->[ $i % @$servers ]->port, "$dir/stop", $i, @pairs));
    } 0 .. 2 * @$servers - 1;
    for my $d (@pauses) {
        sleep 1;
        $redis->pause;
        sleep $d;
        $redis->resume;
    }
    sleep 1;
    RLTest::write_file("$dir/stop", '');
    my (%admitted, $requests);
    for my $kid (@kids) {
        my ($n) = $kid->result;
        for (keys %$n) {
            $requests += $n->{$_}[0];
            $admitted{$_} += $n->{$_}[1];
        }
    }
    return ($requests, %admitted);
}

# The zones' exchanges are over: on every server, for a second more than
# an exchange's call waits (its own time: four intervals, at least a second
# and redis_timeout), each zone's journal empty at every look and no call
# failed: every call sent was answered.
sub settled {
    my ($servers, @zones) = @_;
    my ($since, $last) = (time, '');
    return RLTest::wait_until(sub {
        my ($pending, $failures) = (0, '');
        for my $t (@$servers) {
            my $z = $t->stats->{zones};
            for (@zones) {
                $pending += $z->{$_}{sync}{pending};
                $failures .= "$z->{$_}{sync}{failures} ";
            }
        }
        ($since, $last) = (time, $failures) if $pending > 0 || $failures ne $last;
        return time - $since >= ($timeout > 1 ? $timeout : 1) + 1;
    }, 30);
}

# What Redis holds under a prefix: each key's units, sorted ("sw:" hashes
# of ticks, "fw:" counters of a window, named by its end).
sub held {
    my ($prefix) = @_;
    my %by;
    for my $k (@{ $redis->cmd('KEYS', "${prefix}s:*") }) {
        my ($name) = $k =~ /^\Q$prefix\Es:([0-9a-f]{32})/ or next;
        my $type = $redis->cmd('TYPE', $k);
        if ($type eq 'hash') {
            my %h = @{ $redis->cmd('HGETALL', $k) };
            $by{$name} += $_ for values %h;
        } else {
            $by{$name} += $redis->cmd('GET', $k);
        }
    }
    return join ' ', sort { $a <=> $b } values %by;
}

sub admitted_of {
    my ($admitted, $path) = @_;
    return join ' ', sort { $a <=> $b } map { $admitted->{"$path $_"} // 0 } @keys;
}

# ---- one server, two workers ----

my ($requests, %admitted) = under_pauses([ $servers[0] ], [ '/fw', '/sw' ], 0.3, 1, 4, 1);
diag("one server: $requests requests, admitted by key: fixed_window " . admitted_of(\%admitted, '/fw')
     . ', sliding_window ' . admitted_of(\%admitted, '/sw'));
ok(settled([ $servers[0] ], 'fw', 'sw'), 'one server: every call answered, the journals empty');
my $f = $servers[0]->zone_stats('fw')->{sync};
ok($f->{failures} > 0, "calls were not answered during the pauses ($f->{failures} failures)");
is(held('fw:'), admitted_of(\%admitted, '/fw'), 'fixed_window: Redis holds exactly the units admitted, key by key');
is(held('sw:'), admitted_of(\%admitted, '/sw'), 'sliding_window: Redis holds exactly the units admitted, key by key');
# copies of calls ran (sent again while Redis was paused): more script
# runs than calls, each call's marker
my @markers = @{ $redis->cmd('KEYS', 'fw:c:*') };
my $calls = @markers + @{ $redis->cmd('KEYS', 'sw:c:*') };
my ($runs, $stats) = (0, $redis->cmd('INFO', 'commandstats'));
$runs += $1 while $stats =~ /^cmdstat_eval(?:sha)?:calls=(\d+)/mg;
ok($runs > $calls, "Redis ran $runs script calls for $calls calls: copies found their call's marker");
my $pttl = @markers ? $redis->cmd('PTTL', $markers[0]) : -3;
ok($pttl > 0 && $pttl <= 3_601_000, "a marker expires a second after its call's latest window at most ($pttl ms)");
is(scalar(grep { $redis->cmd('PTTL', $_) < 0 } @{ $redis->cmd('KEYS', '*') }), 0, 'every key in Redis expires');

# the server's counts are Redis's: it admits exactly the rest of the limit
for my $path ('/fw', '/sw') {
    my $spent = $admitted{"$path k1"};
    my %st = $servers[0]->pipelined($path, 'X-Key', ('k1') x (1010 - $spent));
    is($st{200}, 1000 - $spent, "$path: then exactly the limit's other " . (1000 - $spent) . ' admitted');
}

# ---- two servers sharing the Redis ----

($requests, %admitted) = under_pauses(\@servers, [ '/fw2', '/sw2' ], 1, 4, 0.3);
diag("two servers: $requests requests, admitted by key: fixed_window " . admitted_of(\%admitted, '/fw2')
     . ', sliding_window ' . admitted_of(\%admitted, '/sw2'));
ok(settled(\@servers, 'fw2', 'sw2'), 'two servers: every call answered, the journals empty');
is(held('fw2:'), admitted_of(\%admitted, '/fw2'), 'fixed_window: Redis holds exactly the units the two admitted');
is(held('sw2:'), admitted_of(\%admitted, '/sw2'), 'sliding_window: Redis holds exactly the units the two admitted');

# ---- a Redis slower than redis_timeout (50 ms, the default) ----

# an exchange's calls are not a request's: each waits its own time (four
# intervals, at least a second) for its reply, and the exchanges go on
# meanwhile, up to four awaiting replies at once
($requests, %admitted) = under_pauses([ $servers[0] ], ['/slow'], 0.6, 0.6);
ok(settled([ $servers[0] ], 'slow'), 'slow: every call answered, the journal empty');
$f = $servers[0]->zone_stats('slow')->{sync};
is($f->{failures}, 0, 'Redis paused 0.6 s twice, longer than redis_timeout: no call failed');
is($f->{dropped}, 0, 'and no unit dropped');
is(held('slow:'), admitted_of(\%admitted, '/slow'), 'Redis holds exactly the units admitted, key by key');

$_->stop for @servers;
done_testing();
