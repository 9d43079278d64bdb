#!/usr/bin/perl
# algorithm=adaptive through nginx in front of a real slow upstream
# (t/lib/rl_adaptive.py: W workers serving one request at a time, the rest
# queued), driven by an open-loop load generator (arrivals at a set rate
# whatever the answers):
#   * at half the upstream's capacity nothing is refused, and the latency
#     it shows is the test's own reference;
#   * at four times its capacity some requests are refused with 503 (no
#     Retry-After), the limit the stats report comes down, and the admitted
#     requests keep a latency near the reference (no queue builds up);
#   * once the upstream recovers, the limit goes back up;
#   * a slot is given back on every way a request ends: answered, refused by
#     the upstream (502), timed out (504), abandoned by its client (499);
#   * in front of an upstream with room to spare, a minority of requests 20
#     times as slow as the rest (5%), a flood of fast 404s, a thread of
#     fast 502s leave the limit within 25% of limit= and the baseline where
#     the real requests put it (from the limits the stats show, read while
#     the load runs);
#   * Redis zones and bad parameters are refused by nginx -t.
# Every bound is relative to figures the test measures (the reference
# latency, the upstream's W): none depends on how fast the machine is.
# prove: serial (the limit follows the latencies it measures: the other files'
# load would move them)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use POSIX ();
use Time::HiRes qw(sleep time);
use IO::Socket::INET;
use HTTP::Tiny;
use RLTest;

my $python = -x "/usr/bin/python3" ? "/usr/bin/python3" : "";
chomp $python;
plan skip_all => 'python3 is missing' unless $python;
my $helper = "$FindBin::Bin/lib/rl_adaptive.py";

my $W = 4;         # the upstream's workers
my $MEAN = 50;     # ms: capacity W / S = 80 requests a second
my $CAPACITY = 1000 * $W / $MEAN;

my $t = RLTest->new;

# an upstream of W workers (its port, its pid)
sub upstream {
    my ($name, $workers) = @_;
    my $portfile = $t->prefix . "/$name.port";
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        exec($python, $helper, 'upstream', $portfile, '--workers', $workers, '--mean-ms', $MEAN, '--sigma', 0.3)
            or POSIX::_exit(127);
    }
    RLTest::wait_until(sub { -s $portfile }, 10) or BAIL_OUT('the upstream did not start');
    my $port = RLTest::read_file($portfile);
    chomp $port;
    return ($port, $pid);
}
my ($upport, $up) = upstream('upstream', $W);
my ($roomy, $roomy_pid) = upstream('roomy', 1000);   # never queues

$t->start(<<"EOF", workers => 2);
ratelimit_zone ad 1m;
upstream backend {
    server 127.0.0.1:$upport;
}
upstream roomy {
    server 127.0.0.1:$roomy;
}
server {
    listen 127.0.0.1:%%PORT%%;
    proxy_read_timeout 300ms;
    location / {
        ratelimit zone=ad key=backend_a algorithm=adaptive limit=32 interval=200ms name=ad;
        proxy_pass http://backend;
    }
    location /ends/ {
        ratelimit zone=ad key=ends algorithm=adaptive limit=4 name=ends;
        proxy_pass http://backend/;
    }
    location /mix/ {
        ratelimit zone=ad key=mix algorithm=adaptive limit=16 name=mix;
        proxy_read_timeout 5s;    # its slow endpoint answers, not times out
        proxy_pass http://roomy/;
    }
    location = /stats {
        ratelimit_stats;
    }
    location /rl/ {
        ratelimit_api;
    }
}
EOF
my $url = $t->url('/');

# the load generator's seconds: [ {sent, ok, refused, p50_ms, ...} ]
sub load {
    my ($steps, @more) = @_;
    my $to = $url;
    if (@more && $more[0] =~ m{^/}) {
        $to = $t->url(shift @more);
    }
    my @lines = `$python $helper load $to --steps $steps --timeout 2 @more`;
    return [ map { JSON::PP::decode_json($_) } @lines ];
}

sub total {
    my ($secs, $field, $from, $to) = @_;
    my $n = 0;
    $n += $_->{$field} // 0 for @$secs[ $from .. $to ];
    return $n;
}

sub median {
    my @v = sort { $a <=> $b } grep { defined } @_;
    return @v ? $v[ int($#v / 2) ] : undef;
}

my $quiet = load(($CAPACITY / 2) . ':4');
is(total($quiet, 'refused', 0, 3), 0, 'half the capacity: nothing refused');
is(total($quiet, 'ok', 0, 3), total($quiet, 'sent', 0, 3), 'half the capacity: every request answered');
my $reference = median(map { $_->{p50_ms} } @$quiet);
ok($reference >= $MEAN / 2, "the reference latency ($reference ms) is the upstream's");
my $s = $t->rule_stats('ad', 'ad');
is($s->{limit_now}, 32, 'the limit, never reached, stays at limit=');
ok($s->{baseline_us} > 0, 'a baseline was learned');

my $over = load((4 * $CAPACITY) . ':8');
my $refused = total($over, 'refused', 0, 7);
ok($refused > 0, "four times the capacity: requests refused ($refused)");
$s = $t->rule_stats('ad', 'ad');
ok($s->{limit_now} < 32 && $s->{limit_now} <= 3 * $W,
   "the limit came down near the upstream's W=$W: $s->{limit_now}");
my $admitted = median(map { $_->{p50_ms} } @$over[ 4 .. 7 ]);
ok($admitted <= 3 * $reference,
   "admitted requests keep their latency: $admitted ms against $reference ms unloaded");
my $ok = total($over, 'ok', 4, 7) / 4;
ok($ok >= 0.6 * $CAPACITY, "the upstream kept serving: $ok a second of its $CAPACITY");
my $low = $s->{limit_now};

my $r = $t->get('/');
my @refusal;
for (1 .. 50) {    # a refusal's answer, while a burst holds the slots
    my @socks = map { IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port) } 1 .. 40;
    print $_ "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n" for @socks;
    my @answers = map { local $/; my $x = <$_>; $x } @socks;
    @refusal = grep { m{^HTTP/1.1 503} } @answers;
    last if @refusal;
}
ok(@refusal, 'a refusal while the slots are held');
unlike($refusal[0] // '', qr/^Retry-After:/mi, 'a 503 of adaptive states no Retry-After');

# the upstream recovers (five times as fast) under a load it can now serve: the limit
# the load keeps reaching goes back up, the latency being the upstream's
# (a loaded machine may send the load too slowly to reach the limit in one
# round: up to three rounds, decided by the limit the stats read)
HTTP::Tiny->new->get("http://127.0.0.1:$upport/set?mean=" . ($MEAN / 5));
for my $round (1 .. 3) {
    load((5 * $CAPACITY) . ":6");
    $s = $t->rule_stats('ad', 'ad');
    last if $s->{limit_now} > $low;
}
ok($s->{limit_now} > $low, "after the overload the limit goes back up: $s->{limit_now} (was $low)");

# every way a request ends gives its slot back
is($t->get('/ends/close')->{status}, 502, 'an upstream that closes: 502');
is($t->get('/ends/hang')->{status}, 504, 'an upstream that does not answer: 504');
my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port);
print $sock "GET /ends/hang HTTP/1.1\r\nHost: a\r\n\r\n";
sleep 0.1;
close $sock;    # the client leaves: 499
is($t->get('/ends/x')->{status}, 200, 'an answered request: 200');
RLTest::wait_until(sub { $t->rule_stats('ad', 'ends')->{in_flight} == 0 }, 5);
is($t->rule_stats('ad', 'ends')->{in_flight}, 0, 'every slot given back');
sleep 0.5;
is($t->rule_stats('ad', 'ad')->{in_flight}, 0, 'the loaded rule holds no slot once its requests ended');
my $k = $t->key_rule('ad', 'backend_a', 'ad', api => '/rl');
ok(defined $k->{limit_now} && $k->{limit_now} >= 1, 'the key API shows the key\'s limit');
ok($k->{baseline_us} > 0 && $k->{recent_us} > 0, 'and its latencies');

# A minority of requests, among the fast ones of an upstream with room to
# spare (never queued): the limit stays within 25% of limit=16, however
# they end.  Each load is sent until the rule held requests back (its limit
# reached: refusals) in a round, up to three rounds (a loaded machine may
# send too slowly); the limits are the stats', read every 100 ms meanwhile.
sub mix_round {
    my ($steps, @more) = @_;
    my ($refused_before, $lowest) = ($t->rule_stats('ad', 'mix')->{rejected} // 0, 16);
    my $file = $t->prefix . '/limits';
    my $poller = fork() // die "fork: $!";
    if ($poller == 0) {
        open(my $out, '>', $file) or POSIX::_exit(1);
        my $until = time + 30;
        while (time < $until && !-e "$file.stop") {
            my $s = $t->rule_stats('ad', 'mix');
            print $out "$s->{limit_now}\n" if $s && $s->{limit_now};   # 0: none decided yet
            sleep 0.1;
        }
        close $out;
        POSIX::_exit(0);
    }
    my $secs = load($steps, '/mix/ms/' . $MEAN, @more);
    RLTest::write_file("$file.stop", '');
    waitpid($poller, 0);
    unlink "$file.stop";
    my @limits = split /\n/, RLTest::read_file($file);
    $lowest = $_ < $lowest ? $_ : $lowest for @limits;
    my $held = ($t->rule_stats('ad', 'mix')->{rejected} // 0) - $refused_before;
    return ($secs, $lowest, \@limits, $held);
}

sub path_total {
    my ($secs, $path, $field) = @_;
    my $n = 0;
    $n += ($_->{paths}{$path} // {})->{$field} // 0 for @$secs;
    return $n;
}

# (rates at which 16 in flight are reached: 160 a second at 97.5 ms a
# request on average, 320 at 50 ms; closed-loop clients keep it reached)
my $SLOW = 20 * $MEAN;
for my $case (['5% of the requests 20 times as slow', "160:8 --mix /mix/ms/$SLOW:0.05", "/mix/ms/$SLOW", 12],
              ['a thread of fast 502s, 8 a second', '320:8 --clients /mix/status/502:1:125', '/mix/status/502', 12],
              # a tenth of the requests slow, holding two thirds of the slots,
              # and more of them whenever the limit is lower: its mean within
              # 10%, its least within half
              ['12 clients of a slow endpoint beside 20 of the fast one',
               "0:8 --clients /mix/ms/$MEAN:20 --clients /mix/ms/$SLOW:12", "/mix/ms/$SLOW", 8, 0.9 * 16])
{
    my ($what, $load, $minority, $least, $mean) = @$case;
    my ($secs, $lowest, $polls, $held);
    for my $round (1 .. 3) {
        ($secs, $lowest, $polls, $held) = mix_round(split(' ', $load));
        last if $held > 0;
    }
    ok($held > 0, "$what: the limit held requests back ($held refused)");
    ok(@$polls >= 10, "$what: the limit read " . @$polls . " times");
    ok(path_total($secs, $minority, 'ok') + path_total($secs, $minority, 'other') > 0,
       "$what: the minority answered (" . (path_total($secs, $minority, 'ok') + path_total($secs, $minority, 'other')) . ")");
    ok($lowest >= $least, "$what: the limit stayed within " . (100 - 100 * $least / 16) . "% of 16: at least $lowest")
        or diag("the limits read: @$polls");
    if (defined $mean) {
        my $m = 0;
        $m += $_ / @$polls for @$polls;
        ok($m >= $mean, sprintf("%s: the limit's mean %.1f, at least %.1f", $what, $m, $mean))
            or diag("the limits read: @$polls");
    }
}

# a flood of fast 404s (as many as the real requests): the baseline stays
# the real requests' (the upstream's 50 ms, give or take what a busy
# machine adds), not the 404s' (under 1 ms)
my $before = $t->rule_stats('ad', 'mix')->{baseline_us};
ok($before >= 1000 * $MEAN / 2, "the baseline of the fast requests: $before us");
load(($CAPACITY) . ':4', '/mix/ms/' . $MEAN, '--mix', '/mix/status/404:0.5');
my $after = $t->rule_stats('ad', 'mix')->{baseline_us};
# (against the upstream's own 50 ms where a busy machine made the first
# reading longer: it inflates latencies, never shortens them)
my $real = $before < 1000 * $MEAN ? $before : 1000 * $MEAN;
ok($after >= 0.75 * $real, "a flood of 404s leaves the baseline: $after us (before: $before us)");

# nginx -t
$t->conf_refused("ratelimit_zone r 1m redis=127.0.0.1:6379;\n"
                 . RLTest::one_location('ratelimit zone=r key=a algorithm=adaptive limit=8;'),
                 qr/algorithm=adaptive is not decided in Redis: .*a fleet-wide adaptive limit is not defined/,
                 'adaptive on a Redis zone');
$t->conf_refused("ratelimit_zone r 1m;\n"
                 . RLTest::one_location('ratelimit zone=r key=a algorithm=adaptive limit=8 min=9;'),
                 qr/"min=9" exceeds limit=8/, 'min= over limit=');
$t->conf_refused("ratelimit_zone r 1m;\n"
                 . RLTest::one_location('ratelimit zone=r key=a algorithm=adaptive limit=$arg_l limit_default=4 limit_max=8;'),
                 qr/"limit=" of algorithm=adaptive is a number, not a \$variable/, 'a variable limit');

$t->stop();
kill 'TERM', $up, $roomy_pid;
waitpid($_, 0) for $up, $roomy_pid;
done_testing();
