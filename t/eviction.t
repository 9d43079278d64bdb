#!/usr/bin/perl
# Flooding a zone gives no key its budget back, for every algorithm.
#
# Each algorithm has a zone of the smallest size nginx accepts for it.  A
# victim key spends its limit; then 100 times the largest zone's capacity
# of distinct keys, each admitted once, pass through every rule.  The
# victim is still refused, its Retry-After still points at the instant it
# pointed at before the flood, it is refused just before that instant and
# admitted at it; and fresh keys are not refused on their first request.
# Then a flood of keys that each spend their whole budget forces victims out
# of the table: the eviction summary keeps them refused.
#
# A key owing no more than its last request is forgotten when evicted (what
# any new key gets): that is what leaves the summary empty after a flood of
# keys admitted once.  So every victim here owes more.
#
# Timing comes from the clock: each victim's deadline is 30 s after it
# spent its limit, or twice as long as the flood is expected to take if
# that is more (from a flood of a tenth of it, timed first): a loaded
# machine waits longer rather than skip a check.  A deadline the flood has
# passed all the same skips the checks that need it, saying so.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use List::Util qw(max);
use POSIX qw(ceil);
use Test::More;
use IO::Select;
use Time::HiRes qw(time sleep);
use RLTest;

# name => [rule parameters for a victim's deadline $d s after it spent its
# limit, zone size, the victim's own] (fixed_window: the hour, quota:
# midnight, both checked without waiting)
sub rules_for {
    my ($d) = @_;
    my $ms = sub { sprintf '%dms', $_[0] * 1000 };
    return (
        gcra           => [ 'limit=5 period=' . $ms->(5 * $d), '32k' ],
        token_bucket   => [ 'algorithm=token_bucket limit=5 period=' . $ms->(5 * $d) . ' burst=5', '32k' ],
        fixed_window   => [ 'algorithm=fixed_window limit=5 period=1h', '32k' ],
        fixed_first    => [ 'algorithm=fixed_window limit=5 period=' . $ms->($d) . ' align=first', '32k' ],
        sliding_window => [ 'algorithm=sliding_window limit=5 period=' . $ms->($d) . ' buckets=10', '32k' ],
        sliding_log    => [ 'algorithm=sliding_log limit=5 period=' . $ms->($d), '32k' ],
        leaky_bucket   => [ 'algorithm=leaky_bucket limit=5 period=' . $ms->(2.5 * $d) . ' max_delay=0', '32k',
                            'cost=2' ],
        quota          => [ 'algorithm=quota limit=5 reset=daily', '32k' ],
    );
}
my %rules = rules_for(30);
my @names = sort keys %rules;
my %far = (fixed_window => 1, quota => 1);   # deadlines too far to wait for

my $t = RLTest->new();
my $rule = sub { my ($n, $key, $extra) = @_; "ratelimit zone=$n key=\$http_x_$key name=$n $rules{$n}[0]$extra;" };
# keys that spend more than once would wait in leaky_bucket's queue
my @heavy = grep { $_ ne 'leaky_bucket' } @names;

# a leaky_bucket victim spends 2 in one request: owing more than one request,
# and refused (max_delay=0) rather than queued
sub conf {
    my $zones = join '', map { "ratelimit_zone $_ $rules{$_}[1];\n" } @names;
    my $victims = join '', map {
        my $extra = $rules{$_}[2] ? " $rules{$_}[2]" : '';
        "    location /v/$_/ {\n        " . $rule->($_, 'key', $extra) . "\n        alias %%PREFIX%%/html/;\n    }\n"
    } @names;
    my $all = join "\n        ", map { $rule->($_, 'key', '') } @names;
    my $heavy_rules = join "\n        ", map { $rule->($_, 'key', '') } @heavy;
    return <<"EOF";
keepalive_requests 100000000;
$zones
server {
    listen 127.0.0.1:%%PORT%%;
    ratelimit_log_level info;
$victims
    location /flood/ {
        $all
        alias %%PREFIX%%/html/;
    }
    location /heavy/ {
        $heavy_rules
        alias %%PREFIX%%/html/;
    }
    location = /stats {
        ratelimit_stats;
    }
}
EOF
}
$t->start(conf());

my $capacity = 0;
for (values %{ $t->stats->{zones} }) {
    $capacity = $_->{capacity} if $_->{capacity} > $capacity;
}
ok($capacity > 500, "the smallest zones hold up to $capacity keys");
my $flood = 100 * $capacity;

# a tenth of the flood, timed: the deadlines at least twice what the whole
# of it should take (and the zones started again, empty, when they move)
my $start = time;
$t->pipelined('HEAD /flood/index.html', 'X-Key', map { "c$_" } 1 .. $flood / 10);
my $deadline = max(30, ceil(2 * 10 * (time - $start)) + 10);
diag(sprintf 'a tenth of the flood took %.1f s: deadlines %d s after the victims spent', time - $start, $deadline);
if ($deadline > 30) {
    %rules = rules_for($deadline);
    $t->stop;
    $t->start(conf());
}

sub hit {
    my ($name, $key) = @_;
    my $r = $t->get("/v/$name/index.html", { 'X-Key' => $key });
    return ($r->{status}, $r->{headers}{'retry-after'} // 0);
}

# Spends a victim's limit; returns the instant it is admitted again, as
# its first Retry-After says (within the second before it).  A request held
# (delayed) keeps its connection open: closing it would give its place back.
my @held;
sub spend {
    my ($name, $key) = @_;
    for (1 .. 20) {
        my $at = time;
        my $s = $t->open_request("/v/$name/index.html", { 'X-Key' => $key, Connection => 'close' });
        unless (IO::Select->new($s)->can_read(0.5)) {
            push @held, $s;   # delayed (or slow): its answer does not matter
            next;
        }
        my $r = RLTest::read_response($s);
        return $at + $r->{headers}{'retry-after'} if $r->{status} == 429;
    }
    die "$name: never refused";
}

my %deadline = map { $_ => spend($_, 'victim') } @names;

$start = time;
my %s = $t->pipelined('HEAD /flood/index.html', 'X-Key', map { "f$_" } 1 .. $flood);
my $took = time - $start;
is_deeply(\%s, { 200 => $flood }, "$flood distinct keys, each admitted once by every rule, none refused");
diag(sprintf "the flood took %.1f s", $took);
my $st = $t->stats->{zones};
for my $n (@names) {
    ok($st->{$n}{evictions} >= $flood - $st->{$n}{capacity}, "$n: the flood evicted $st->{$n}{evictions} keys");
}

# fresh keys' first requests
%s = $t->pipelined('HEAD /flood/index.html', 'X-Key', map { "fresh$_" } 1 .. 1000);
ok(($s{429} // 0) <= 10, 'at most 1% of fresh keys refused on their first request: ' . ($s{429} // 0));

# each victim: still refused, with the same deadline
my %left;
for my $n (@names) {
    my $at = time;
    my ($status, $retry) = hit($n, 'victim');
    if ($deadline{$n} - $at < 2) {
        diag("$n: its deadline passed during the flood, not checked");
        next;
    }
    is($status, 429, "$n: still refused after the flood");
    ok(abs($at + $retry - $deadline{$n}) <= 1.01, "$n: Retry-After still points at the same instant ($retry s)");
    $left{$n} = 1 unless $far{$n};
}

# wait for each deadline: refused a second before, admitted at it (every
# victim's checks in the order of their instants)
my @checks = sort { $a->[0] <=> $b->[0] }
    map { ([ $deadline{$_} - 1.1, $_, 429 ], [ $deadline{$_} + 0.05, $_, 200 ]) } keys %left;
for my $c (@checks) {
    my ($when, $n, $want) = @$c;
    my $wait = $when - time;
    sleep $wait if $wait > 0;
    if ($want == 200) {
        is((hit($n, 'victim'))[0], 200, "$n: admitted at its deadline, not one request later");
    } elsif (time < $deadline{$n} - 1) {
        is((hit($n, 'victim'))[0], 429, "$n: refused just before its deadline");
    } else {
        diag("$n: the machine stalled past a second before its deadline, not checked");
    }
}

# Keys that spend their whole budget push the victims out of the table:
# what the victims owe stays in the summary.  (leaky_bucket's summary is in
# the unit tests: here its heavy keys would wait in its queue.)
%deadline = map { $_ => spend($_, 'victim2') } @heavy;
$t->pipelined('HEAD /heavy/index.html', 'X-Key', map { my $k = "h$_"; ($k) x 6 } 1 .. 3 * $capacity);
$st = $t->stats->{zones};
for my $n (@heavy) {
    ok($st->{$n}{live_evictions} > 0, "$n: keys owing their whole budget evicted ($st->{$n}{live_evictions})");
    my $at = time;
    my ($status, $retry) = hit($n, 'victim2');
    next if $deadline{$n} - $at < 1;
    is($status, 429, "$n: a spent key is still refused after being pushed out");
    ok($at + $retry >= $deadline{$n} - 1.01, "$n: and no sooner than its Retry-After said before");
}
ok((grep { $_->{summary_refusals} > 0 } values %$st), 'stats: refusals by the summary are counted');

$t->stop();
done_testing();
