#!/usr/bin/perl
# algorithm=concurrency through nginx, against a slow upstream that counts
# the requests it holds at once: at most `limit` of a key in flight, a slot
# given back whatever ends a request (its end, a client closing early or
# while it waits, a worker killed, a reload), and with max_wait the
# requests over the limit wait their turn, first come first served.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest qw(statuses_of);
use RLSlowUpstream;

my $up = RLSlowUpstream->new->start;
my $uport = $up->port;

# a concurrency rule a location: [name, its parameters, the upstream's hold
# in ms]
my $locations = join '', map {
    my ($name, $params, $hold) = @$_;
    "    location /$name/ {\n"
    . "        ratelimit zone=c key=\$http_x_key algorithm=concurrency $params name=$name;\n"
    . "        proxy_pass http://slow/hold/$hold;\n    }\n";
} ['two', 'limit=2', 1000], ['wait', 'limit=2 max_wait=3500ms', 1000], ['fifty', 'limit=50', 300],
  ['long', 'limit=2 max_wait=20s', 20000], ['kill', 'limit=2', 1500];

my $t = RLTest->new();
my $conf = <<"EOF";
keepalive_requests 100000000;
ratelimit_zone c 4m;
upstream slow { server 127.0.0.1:$uport; }
proxy_http_version 1.1;
proxy_read_timeout 60s;

server {
    listen 127.0.0.1:%%PORT%%;
    ratelimit_headers both;

$locations    location /rated/ {
        ratelimit zone=c key=\$http_x_key limit=60 period=1m name=rate;
        ratelimit zone=c key=\$http_x_key algorithm=concurrency limit=2 name=pair;
        proxy_pass http://slow/hold/1000;
    }
    location /rl/ { ratelimit_api; }
    location = /stats { ratelimit_stats; }
}
EOF
$t->write_conf($conf, workers => 2);
$t->start();

# ---- at most two at once ----

my @r = $t->at_once({ gap => 0.05 }, map { [ '/two/', 'X-Key' => 'k1', 'X-Seq' => $_ ] } 1 .. 5);
# (two workers may take the connections in another order than sent)
is(join(' ', sort map { $_->{status} } @r), '200 200 429 429 429', 'limit=2, 5 at once: 2 served, 3 refused');
# a key that holds nothing: every slot free, as a fresh rate key shows its
# whole budget
{
    my $k = $t->key_rule('c', 'never-seen', 'two');
    is("$k->{remaining} $k->{in_flight}", '2 0', 'key API: a fresh key has its 2 slots remaining');
}
my @served = sort { $b->{headers}{'x-ratelimit-remaining'} <=> $a->{headers}{'x-ratelimit-remaining'} }
             grep { $_->{status} == 200 } @r;
my ($refused) = grep { $_->{status} == 429 } @r;
ok(!defined $refused->{headers}{'retry-after'}, 'a refusal for lack of a slot has no Retry-After');
is($served[0]{headers}{'ratelimit'}, '"two";r=1', 'RateLimit: the slots left, no t');
is($served[0]{headers}{'ratelimit-policy'}, '"two";q=2', 'RateLimit-Policy: the limit, no window');
is($served[1]{headers}{'x-ratelimit-remaining'}, 0, 'X-RateLimit-Remaining of the second: 0');
ok(!defined $served[1]{headers}{'x-ratelimit-reset'}, 'no X-RateLimit-Reset');
is($up->most, 2, 'the upstream never held more than 2');
@r = $t->at_once(map { [ '/two/', 'X-Key' => 'k1' ] } 1 .. 2);
is(statuses_of(@r), '200 200', 'then 2 more at once are served');
is(statuses_of($t->at_once(map { [ '/two/', 'X-Key' => "other$_" ] } 1 .. 3)), '200 200 200', 'other keys are served');

# ---- waiting for a slot, first come first served ----

$up->reset_most;
my $t0 = time;
@r = $t->at_once({ gap => 0.2 }, map { [ '/wait/', 'X-Key' => 'w', 'X-Seq' => "w$_" ] } 1 .. 5);
is(statuses_of(@r), '200 200 200 200 200', 'max_wait: all 5 served');
is($up->most, 2, '... never more than 2 at the upstream');
my @ev = grep { $_->[0] =~ /^w\d$/ } $up->events;
my %start = map { $_->[0] => $_->[2] } grep { $_->[1] eq 'start' } @ev;
my @order = sort { $start{$a} <=> $start{$b} } keys %start;
is("@order", 'w1 w2 w3 w4 w5', 'served in the order they came');
my @ends = sort { $a <=> $b } map { $_->[2] } grep { $_->[1] eq 'end' } @ev;
ok($start{w3} >= $ends[0] - 0.001 && $start{w4} >= $ends[1] - 0.001 && $start{w5} >= $ends[2] - 0.001,
   'none started before a slot came free');
is($t->rule_stats('c', 'wait')->{waited}, 3, 'stats: 3 waited');

# a waiter that goes away leaves the queue, and requests closed mid-way
# give their slots back (they hold 20 s: sent on their own connections)
{
    my @bg = map { $t->open_request('/long/', { 'X-Key' => 'L' }) } 1 .. 2;
    RLTest::wait_until(sub { ($up->in_flight // 0) >= 2 }, 10);
    my $w0 = time;
    my $s = $t->open_request('/long/', { 'X-Key' => 'L' });
    # a waiter that goes away leaves the queue: the next one would be first
    sleep 0.3;
    close $s;
    RLTest::wait_until(sub { ($t->key_rule('c', 'L', 'long')->{waiting} // 1) == 0 }, 5);
    my $k = $t->key_rule('c', 'L', 'long');
    is("$k->{in_flight} $k->{waiting}", '2 0', 'a client closing while it waits leaves the queue (key API: 2 in flight, 0 waiting)');
    # closing mid-request frees the slot within a second
    close $_ for @bg;
    my $c0 = time;
    RLTest::wait_until(sub { $t->key_rule('c', 'L', 'long')->{in_flight} == 0 }, 5);
    my $took = time - $c0;
    ok($took < 1, sprintf('clients closing mid-request free their slots (%.2f s)', $took));
}

# ---- 1,000 at once across 2 workers ----

# (the upstream still holds what clients closed above: counted from here)
$up->reset_most;
my $before = $up->in_flight;
@r = $t->at_once(map { [ '/fifty/', 'X-Key' => 'many' ] } 1 .. 1000);
my %n;
$n{ $_->{status} }++ for @r;
ok($n{200} >= 50, "1,000 at once: $n{200} served");
is($n{200} + ($n{429} // 0), 1000, '... the rest refused');
ok($up->most - $before <= 50, 'never more than 50 in flight at the upstream (' . ($up->most - $before) . ')');
RLTest::wait_until(sub { $t->rule_stats('c', 'fifty')->{in_flight} == 0 }, 10);
is($t->rule_stats('c', 'fifty')->{in_flight}, 0, 'none leaked: the stats show 0 in flight');
ok($t->rule_stats('c', 'fifty')->{peak} >= 50 && $t->rule_stats('c', 'fifty')->{peak} <= 50, 'peak: 50');

# ---- with a rate, atomically ----

@r = $t->at_once({ gap => 0.05 }, map { [ '/rated/', 'X-Key' => 'r' ] } 1 .. 3);
is(join(' ', sort map { $_->{status} } @r), '200 200 429', 'a rate and 2 at once');
my $rs = $t->rule_stats('c', 'rate');
is($rs->{allowed}, 2, 'the one refused for lack of a slot spent nothing at the rate');

# ---- a worker killed holding slots ----

my @killed;
{
    my @bg = map { $t->open_request('/kill/', { 'X-Key' => 'K' }) } 1 .. 2;
    RLTest::wait_until(sub { $t->key_rule('c', 'K', 'kill')->{in_flight} == 2 }, 10);
    @killed = $t->worker_pids;
    kill 'KILL', @killed;   # both: whichever holds the slots dies
    RLTest::wait_until(sub { my @now = $t->worker_pids; @now == 2 && !grep { my $p = $_; grep { $_ == $p } @killed } @now }, 10);
    close $_ for @bg;
    my $k = $t->key_rule('c', 'K', 'kill');
    is($k->{in_flight}, 2, 'after SIGKILL the dead workers\' slots still count: never over the limit meanwhile');
    # the next decision that finds no slot asks whether the holders live
    $up->reset_most;
    my $base = $up->in_flight;
    @r = $t->at_once({ gap => 0.05 }, map { [ '/kill/', 'X-Key' => 'K' ] } 1 .. 3);
    is(join(' ', sort map { $_->{status} } @r), '200 200 429', 'the next requests of the key find their slots back at once: 2 served, the third refused');
    ok($up->most - $base <= 2, 'never more than 2 at the upstream');
    RLTest::wait_until(sub { $t->rule_stats('c', 'kill')->{in_flight} == 0 }, 5);
    is($t->rule_stats('c', 'kill')->{in_flight}, 0, 'none held afterwards');
}

# ---- a reload with requests in flight ----

{
    my @bg = map { $t->open_request('/kill/', { 'X-Key' => 'R' }) } 1 .. 2;
    RLTest::wait_until(sub { $t->key_rule('c', 'R', 'kill')->{in_flight} == 2 }, 10);
    # a reload, not waiting for the old workers to finish
    $t->reload_started(2);
    is($t->get('/kill/', { 'X-Key' => 'R' })->{status}, 429, 'after a reload the new workers see the old ones\' slots');
    my @done = map { my $b = ''; sysread($_, $b, 4096) while $b !~ /\r\n\r\n/; $b } @bg;
    is(scalar(grep { m{^HTTP/1\.1 200 } } @done), 2, 'the requests in flight end in the old workers');
    RLTest::wait_until(sub { $t->key_rule('c', 'R', 'kill')->{in_flight} == 0 }, 5);
    is($t->key_rule('c', 'R', 'kill')->{in_flight}, 0,
       'and the old workers give their slots back');
    is(statuses_of($t->at_once(map { [ '/kill/', 'X-Key' => 'R' ] } 1 .. 2)), '200 200', 'both slots free again');
}

# the kills are the test's: the harness would flag them
$t->forget_kills(\@killed);

# ---- configuration ----

for my $case (
    [ 'ratelimit zone=c algorithm=concurrency limit=2 period=1m;',
      qr/"ratelimit" directive: "period=" does not apply to algorithm=concurrency: it limits the requests of a key in flight at once, not a rate/ ],
    [ 'ratelimit zone=c algorithm=concurrency limit=2 cost=2;', qr/"cost=" does not apply to algorithm=concurrency/ ],
    [ 'ratelimit zone=c algorithm=concurrency limit=5000;', qr/"limit=5000" is too large for algorithm=concurrency/ ],
    [ 'ratelimit zone=c limit=2 max_wait=1s;', qr/"max_wait=" does not apply to algorithm=gcra: max_wait is for concurrency/ ],
    [ 'ratelimit zone=c algorithm=concurrency limit=2 max_wait=2h;', qr/invalid "max_wait=2h": expected a time from 0ms to 1h/ ],
    [ 'ratelimit zone=r algorithm=concurrency limit=2 max_wait=1s;',
      qr/rule "concurrency_2_at_once" in zone=r: "max_wait=" does not apply to algorithm=concurrency in a Redis zone/ ],
) {
    my ($rc, $out) = $t->nginx_t($t->conf_text("ratelimit_zone c 1m; ratelimit_zone r 1m redis=127.0.0.1:1;\n"
        . "server { listen 127.0.0.1:%%PORT%%; location / { $case->[0] } }"));
    isnt($rc, 0, "nginx -t fails: $case->[0]");
    like($out, $case->[1], "nginx -t names it: $case->[0]");
}

$t->stop();
$up->stop();
done_testing();
