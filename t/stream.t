#!/usr/bin/perl
# ratelimit in nginx's stream {} (ngx_stream_ratelimit_module), end to end
# through Debian's nginx with its dynamic stream module, a counting TCP and
# UDP upstream, and clients bound to their own source addresses:
#
#   * limit=5 period=1m per $binary_remote_addr: from one address the 6th
#     connection is closed before nginx connects upstream (the upstream
#     counts 5), another address has its own 5; a short period's 5 come
#     back after it;
#   * UDP: 5 sessions, the 6th's datagram dropped (the upstream counts 5);
#   * TLS passthrough limited per SNI name through ssl_preread (decided as
#     the content phase starts), each name its own limit, the name intact
#     in the access log;
#   * algorithm=concurrency limit=2 beside limit_conn 2: the same
#     connections admitted, slots given back as sessions end;
#   * delay=: a connection held on a timer, the upstream contacted after it;
#   * several rules, a dry run, "ratelimit off", $ratelimit_status and
#     $ratelimit_rule in the stream access log, the refusal's log line;
#   * a reload keeps every key's state; a worker killed mid-session leaks
#     no concurrency slot.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest qw(wait_until);
use RLStream;

my $up = RLStream::Upstream->new->start;
my $upp = $up->port;
my $t = RLTest->new;
my %p = map { $_ => RLTest::free_port() } qw(five short udp sni conc lconn delay dry multi off kill);

my $stream = <<"EOF2";
    log_format rl '\$remote_addr \$server_port \$status \$ratelimit_status \$ratelimit_rule sni=\$ssl_preread_server_name';
    access_log %%PREFIX%%/stream.log rl;
    ratelimit_zone s 1m;
    ratelimit_zone c 1m;
    limit_conn_zone \$binary_remote_addr zone=lc:1m;

    # every server without rules of its own has this one
    ratelimit zone=s limit=1 period=1m name=stream_level;

    server {
        listen 127.0.0.1:$p{five};
        ratelimit zone=s limit=5 period=1m name=five;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{short};
        ratelimit zone=s limit=5 period=3s name=short;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{udp} udp;
        ratelimit zone=s limit=5 period=1m name=udp;
        proxy_responses 1;
        proxy_timeout 2s;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{sni};
        ssl_preread on;
        ratelimit zone=s key=\$ssl_preread_server_name limit=2 period=1m name=sni;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{conc};
        ratelimit zone=c algorithm=concurrency limit=2 name=conc;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{lconn};
        ratelimit off;
        limit_conn lc 2;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{delay};
        ratelimit zone=s algorithm=leaky_bucket limit=1 period=1s max_delay=3s name=paced;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{dry};
        ratelimit zone=s limit=1 period=1m name=dry;
        ratelimit_dry_run on;
        ratelimit_log_level warn;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{multi};
        ratelimit zone=s limit=3 period=1m name=per_addr;
        ratelimit zone=s key=\$server_port limit=4 period=1m name=per_port;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{off};
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{kill};
        ratelimit zone=c algorithm=concurrency limit=1 name=one;
        proxy_pass 127.0.0.1:$upp;
    }
EOF2

my $http = 'server { listen 127.0.0.1:%%PORT%%; location /stats { ratelimit_stats; } location / { return 204; } }';
$t->start($http, main => RLStream::main($t, $stream));

sub tcps {
    my ($port, $n, %opt) = @_;
    return join ' ', map { RLStream::tcp($port, %opt) || 'closed' } 1 .. $n;
}

# the upstream's count, once it has settled (connections it accepted are
# counted by their own processes)
sub upstream_after {
    my ($kind, $want) = @_;
    wait_until(sub { $up->count($kind) >= $want }, 3);
    sleep 0.2;
    return $up->count($kind);
}

sub stream_log { RLTest::read_file($t->prefix . '/stream.log') }

# ---- limit=5 period=1m per address -------------------------------------------

my $base = $up->count('tcp');
is(tcps($p{five}, 6, from => '127.0.0.2'), 'ok ok ok ok ok closed', 'one address: the 6th connection is closed');
is(upstream_after('tcp', $base + 5), $base + 5, 'the upstream saw 5 connections: the 6th never reached it');
is(tcps($p{five}, 6, from => '127.0.0.3'), 'ok ok ok ok ok closed', 'another address has its own 5');
is(upstream_after('tcp', $base + 10), $base + 10, 'the upstream saw 10 in all');
like(stream_log(), qr/^127\.0\.0\.2 $p{five} 503 REJECTED five /m, 'the refusal: 503 REJECTED and its rule in the stream access log');
is(scalar(() = stream_log() =~ /^127\.0\.0\.2 $p{five} 200 PASSED five /mg), 5, 'five PASSED');
$t->log_like(qr/\[error\] .*ratelimit: rejected by rule "five" in zone "s", key fingerprint [0-9a-f]{16}, cost 1, retry after \d+ ms while initializing session, client: 127\.0\.0\.2, server: 127\.0\.0\.1:$p{five}/,
             'the refusal is logged as HTTP logs it (level error, key by fingerprint)');

# after the period, 5 more
my $start = time;
is(tcps($p{short}, 6, from => '127.0.0.4'), 'ok ok ok ok ok closed', 'period=3s: 5, then closed');
sleep(3.2 - (time - $start)) if time - $start < 3.2;
is(tcps($p{short}, 5, from => '127.0.0.4'), 'ok ok ok ok ok', 'after the period, 5 more');

# ---- UDP ---------------------------------------------------------------------

my $ubase = $up->count('udp');
is(join(' ', map { RLStream::udp($p{udp}, from => '127.0.0.2') || 'dropped' } 1 .. 6),
   'ok ok ok ok ok dropped', 'UDP: 5 sessions, the 6th dropped');
is(upstream_after('udp', $ubase + 5), $ubase + 5, 'the upstream received 5 datagrams: the 6th never reached it');
is(RLStream::udp($p{udp}, from => '127.0.0.3'), 'ok', 'UDP: another address has its own');
like(stream_log(), qr/^127\.0\.0\.2 $p{udp} 503 REJECTED udp /m, 'a dropped UDP session: 503 REJECTED');

# ---- TLS passthrough per SNI name --------------------------------------------

is(join(' ', map { RLStream::tls($p{sni}, 'a.example') || 'closed' } 1 .. 3), 'ok ok closed',
   'SNI a.example: 2, the 3rd closed');
is(join(' ', map { RLStream::tls($p{sni}, 'b.example', from => '127.0.0.2') || 'closed' } 1 .. 3), 'ok ok closed',
   'SNI b.example: its own 2');
is(RLStream::tls($p{sni}, 'a.example', from => '127.0.0.3'), '', 'a.example from another address: the name is the key');
like(stream_log(), qr/^127\.0\.0\.1 $p{sni} 503 REJECTED sni sni=a\.example$/m,
     'the refused session logs its name: ssl_preread read it before the decision');
is(scalar(() = stream_log() =~ /^\S+ $p{sni} 200 PASSED sni sni=b\.example$/mg), 2, 'b.example: 2 passed, its name intact');

# ---- concurrency beside limit_conn -------------------------------------------

for my $case ([ conc => 'algorithm=concurrency limit=2' ], [ lconn => 'limit_conn 2' ]) {
    my ($name, $what) = @$case;
    my @open = map { RLStream::tcp_open($p{$name}, from => '127.0.0.5') } 1 .. 3;
    is(join(' ', map { $_ ? 'ok' : 'closed' } @open), 'ok ok closed', "$what: 2 at once, the 3rd closed");
    is(RLStream::tcp($p{$name}, from => '127.0.0.6'), 'ok', "$what: another address meanwhile");
    close $open[0];
    my $again;
    wait_until(sub { $again = RLStream::tcp_open($p{$name}, from => '127.0.0.5') }, 3);
    ok($again, "$what: one ended, one more admitted");
    close $_ for grep { $_ } $again, @open[1 .. 2];
}

# ---- delay -------------------------------------------------------------------

{
    my $before = $up->count('tcp');
    my $t0 = time;
    my $first = RLStream::tcp_open($p{delay}, from => '127.0.0.7');
    my $t1 = time;
    my $second = RLStream::tcp_open($p{delay}, from => '127.0.0.7');
    my $t2 = time;
    ok($first && $second, 'paced: both admitted');
    cmp_ok($t1 - $t0, '<', 0.5, 'the first at once');
    cmp_ok($t2 - $t1, '>=', 0.9, 'the second held about a period (limit=1 period=1s)');
    is($up->count('tcp'), $before + 2, 'the upstream saw both');
    close $_ for grep { $_ } $first, $second;
    # (the access log's line is written as the session ends)
    wait_until(sub { stream_log() =~ /^127\.0\.0\.7 $p{delay} 200 DELAYED / }, 3);
    like(stream_log(), qr/^127\.0\.0\.7 $p{delay} 200 DELAYED paced /m, 'DELAYED in the access log');
}

# ---- a dry run, several rules, off, inherited --------------------------------

is(tcps($p{dry}, 3, from => '127.0.0.8'), 'ok ok ok', 'dry run: nothing closed');
like(stream_log(), qr/^127\.0\.0\.8 $p{dry} 200 REJECTED_DRY_RUN dry /m, 'REJECTED_DRY_RUN');
$t->log_like(qr/\[warn\] .*ratelimit: would reject \(dry run\) by rule "dry"/, 'a dry run logs "would reject" at its level');

is(tcps($p{multi}, 4, from => '127.0.0.9'), 'ok ok ok closed', 'two rules: the address rule binds first');
is(tcps($p{multi}, 2, from => '127.0.0.10'), 'ok closed', 'then the port rule, whoever connects');
like(stream_log(), qr/^127\.0\.0\.10 $p{multi} 503 REJECTED per_port /m, '$ratelimit_rule names the binding rule');

is(tcps($p{off}, 2, from => '127.0.0.11'), 'ok closed', 'a server without rules has the stream block\'s');
is(tcps($p{lconn}, 3, from => '127.0.0.11'), 'ok ok ok', '"ratelimit off" removes them');

# ---- the HTTP side's stats list the stream zones ----------------------------

{
    my $zone = $t->zone_stats('s');
    ok($zone, 'ratelimit_stats of an http server lists the stream zone');
    ok($zone && $zone->{rules}{five}, 'with its rules');
}

# ---- a reload keeps every key's state ----------------------------------------

is(tcps($p{five}, 3, from => '127.0.0.12'), 'ok ok ok', '3 of 5 before a reload');
$t->reload($http, main => RLStream::main($t, $stream));
is(tcps($p{five}, 3, from => '127.0.0.12'), 'ok ok closed', 'after it, 2 more and no more');
is(tcps($p{five}, 1, from => '127.0.0.2'), 'closed', 'and the first address is still out');

# ---- a worker killed mid-session ---------------------------------------------

{
    my $held = RLStream::tcp_open($p{kill}, from => '127.0.0.13');
    ok($held, 'limit=1: one session held');
    is(RLStream::tcp($p{kill}, from => '127.0.0.13'), '', 'a second is closed');
    my @workers = $t->worker_pids;
    kill 'KILL', @workers;
    ok($t->forget_kills(\@workers), 'the worker holding the slot is killed, and reaped');
    wait_until(sub { $t->ready_workers >= 1 }, 10);
    close $held;
    my $next;
    wait_until(sub { $next = RLStream::tcp_open($p{kill}, from => '127.0.0.13') }, 5);
    ok($next, 'its slot is not leaked: a new session is admitted');
    is(RLStream::tcp($p{kill}, from => '127.0.0.13'), '', 'and the limit still holds');
    close $next if $next;
}

$t->stop;
done_testing;
