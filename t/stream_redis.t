#!/usr/bin/perl
# Stream zones on Redis, end to end: two nginx servers share one Redis.
#
#   * redis=: limit=5 per address decided in Redis: exactly 5 connections
#     admitted across both servers, one after another and 30 at once (the
#     upstream counts 5), another
#     address its own 5; UDP sessions the same; a limit per SNI name
#     (decided as the content phase starts) the same;
#   * a session waits for Redis's reply while its worker serves others;
#     its client may leave meanwhile;
#   * concurrency in Redis: 2 sessions open across both servers, a third
#     refused, one closed gives its lease back to the other server;
#   * on_redis_error= while Redis does not answer: deny refuses, allow
#     admits past the limit, local decides in the zone's memory;
#   * redis_sync=: what one server admitted reaches the other through
#     Redis, which refuses the same address after its first session there.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Socket::INET;
use Time::HiRes qw(time sleep);
use RLTest qw(wait_until);
use RLRedis;
use RLStream;

my $redis = RLRedis->new->start;
my $rport = $redis->port;
my $dead = RLTest::free_port();   # nothing listens there
my $up = RLStream::Upstream->new->start;
my $upp = $up->port;

my @p = qw(exact sni udp conc deny allow local sync);
my @fleet;
my %p;
for my $i (0, 1) {
    my $t = RLTest->new;
    $p{$i} = { map { $_ => RLTest::free_port() } @p };
    my %q = %{ $p{$i} };
    my $stream = <<"EOF";
    log_format rl '\$remote_addr \$server_port \$status \$ratelimit_status \$ratelimit_rule';
    access_log %%PREFIX%%/stream.log rl;
    ratelimit_zone exact 1m redis=127.0.0.1:$rport redis_prefix=e: redis_timeout=3s;
    ratelimit_zone conc 1m redis=127.0.0.1:$rport redis_prefix=c: redis_timeout=3s;
    ratelimit_zone deny 1m redis=127.0.0.1:$dead on_redis_error=deny redis_timeout=1s;
    ratelimit_zone allow 1m redis=127.0.0.1:$dead on_redis_error=allow redis_timeout=1s;
    ratelimit_zone local 1m redis=127.0.0.1:$dead on_redis_error=local redis_timeout=1s;
    ratelimit_zone sync 1m redis=127.0.0.1:$rport redis_prefix=y: redis_sync=100ms redis_timeout=3s;

    server {
        listen 127.0.0.1:$q{exact};
        ratelimit zone=exact limit=5 period=1m name=exact;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$q{sni};
        ssl_preread on;
        ratelimit zone=exact key=\$ssl_preread_server_name limit=2 period=1m name=sni;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$q{udp} udp;
        ratelimit zone=exact limit=5 period=1m name=udp;
        proxy_responses 1;
        proxy_timeout 2s;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$q{conc};
        ratelimit zone=conc algorithm=concurrency limit=2 name=conc;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$q{deny};
        ratelimit zone=deny limit=5 period=1m name=deny;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$q{allow};
        ratelimit zone=allow limit=2 period=1m name=allow;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$q{local};
        ratelimit zone=local limit=2 period=1m name=local;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$q{sync};
        ratelimit zone=sync algorithm=fixed_window limit=5 period=1h name=sync;
        proxy_pass 127.0.0.1:$upp;
    }
EOF
    my $http = 'server { listen 127.0.0.1:%%PORT%%; location /stats { ratelimit_stats; } location / { return 204; } }';
    $t->start($http, main => RLStream::main($t, $stream));
    push @fleet, $t;
}

# the upstream's count, once it has settled
sub upstream_after {
    my ($kind, $want) = @_;
    wait_until(sub { $up->count($kind) >= $want }, 3);
    sleep 0.2;
    return $up->count($kind);
}

# $n connections to $name's port, alternating between the two servers
sub across {
    my ($name, $n, %opt) = @_;
    return join ' ', map { RLStream::tcp($p{ $_ % 2 }{$name}, %opt) || 'closed' } 0 .. $n - 1;
}

# ---- redis=: exact across two servers -------------------------------------------

my $base = $up->count('tcp');
is(across('exact', 7, from => '127.0.0.2'), 'ok ok ok ok ok closed closed',
   'two servers, one Redis: exactly 5 connections of an address admitted across both');
is(upstream_after('tcp', $base + 5), $base + 5, 'the upstream counts 5');
is(across('exact', 6, from => '127.0.0.3'), 'ok ok ok ok ok closed', 'another address has its own 5');
is(upstream_after('tcp', $base + 10), $base + 10, 'the upstream counts 10 in all');
my $stats = $fleet[0]->stats->{zones}{exact}{redis};
ok($stats && $stats->{decisions} >= 1, 'the stats count decisions taken in Redis')
    or diag explain $fleet[0]->stats->{zones}{exact};
my $port1 = $p{1}{exact};
like(RLTest::read_file($fleet[1]->prefix . '/stream.log'), qr/^127\.0\.0\.2 $port1 503 REJECTED exact$/m,
     'the other server refused the 6th: 503 REJECTED in its stream access log');

# 30 connections at once, 15 to each server, all waiting for Redis
# together: still exactly 5
$base = $up->count('tcp');
my @open = map {
    IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $p{ $_ % 2 }{exact}, Proto => 'tcp',
                          LocalAddr => '127.0.0.9', Timeout => 5) or die "connect: $!"
} 0 .. 29;
my $answered = grep { RLStream::read_line($_, 5) =~ /^ok/ } @open;
close $_ for @open;
is($answered, 5, '30 connections at once over both servers: exactly 5 admitted');
is(upstream_after('tcp', $base + 5), $base + 5, 'the upstream counts 5 of them');

my @sni = map { RLStream::tls($p{ $_ % 2 }{sni}, $_ < 3 ? 'a.example' : 'b.example') || 'closed' } 0 .. 5;
is("@sni", 'ok ok closed ok ok closed', 'per SNI name through ssl_preread, decided in Redis: 2 a name across both servers');

my $ubase = $up->count('udp');
my @u = map { RLStream::udp($p{ $_ % 2 }{udp}, from => '127.0.0.4') || 'dropped' } 0 .. 5;
is("@u", 'ok ok ok ok ok dropped', 'UDP: 5 sessions across both servers, the 6th dropped');
is(upstream_after('udp', $ubase + 5), $ubase + 5, 'the upstream counts 5 datagrams');

# ---- the wait: a session waits for Redis without holding its worker ------------------

{
    $redis->pause;
    my $waiting = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $p{0}{exact}, LocalAddr => '127.0.0.8')
        or die "connect: $!\n";
    my $gone = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $p{0}{exact}, LocalAddr => '127.0.0.9')
        or die "connect: $!\n";
    sleep 0.3;
    close $gone;   # its client leaves while its session waits
    is(RLStream::tcp($p{0}{local}, from => '127.0.0.8'), 'ok',
       'while Redis does not answer, the same worker proxies another server\'s session');
    is(RLStream::read_line($waiting, 0.3), '', 'the waiting session is not proxied before Redis answers');
    $redis->resume;
    like(RLStream::read_line($waiting, 5), qr/^ok/, 'Redis answers: the waiting session is proxied');
    close $waiting;
}

# ---- concurrency in Redis -------------------------------------------------------

{
    my $a = RLStream::tcp_open($p{0}{conc}, from => '127.0.0.5');
    my $b = RLStream::tcp_open($p{1}{conc}, from => '127.0.0.5');
    ok($a && $b, 'concurrency limit=2: one session on each server');
    is(RLStream::tcp($p{0}{conc}, from => '127.0.0.5'), '', 'a third, on either server, is closed');
    is(RLStream::tcp($p{1}{conc}, from => '127.0.0.5'), '', 'and on the other');
    close $a;
    # the lease is released in Redis as the session ends (not waited for)
    my $c;
    wait_until(sub { $c = RLStream::tcp_open($p{1}{conc}, from => '127.0.0.5') }, 5);
    ok($c, 'a session closed on one server gives its slot to the other');
    close $b;
    close $c if $c;
}

# ---- on_redis_error ---------------------------------------------------------------

is(RLStream::tcp($p{0}{deny}, from => '127.0.0.6'), '', 'on_redis_error=deny: refused while Redis does not answer');
is(join(' ', map { RLStream::tcp($p{0}{allow}, from => '127.0.0.6') || 'closed' } 1 .. 4), 'ok ok ok ok',
   'on_redis_error=allow: admitted past limit=2');
is(join(' ', map { RLStream::tcp($p{0}{local}, from => '127.0.0.6') || 'closed' } 1 .. 3), 'ok ok closed',
   'on_redis_error=local: limit=2 decided in the zone');
$fleet[0]->log_like(qr/ratelimit: .*127\.0\.0\.1:$dead/, 'the unreachable Redis is logged');

# ---- redis_sync= ----------------------------------------------------------------------

# the hour's window does not end within the test
sleep 1 while 3600 - time % 3600 < 30;

is(join(' ', map { RLStream::tcp($p{0}{sync}, from => '127.0.0.7') || 'closed' } 1 .. 6), 'ok ok ok ok ok closed',
   'redis_sync: the first server admits 5 from its own zone');
# the other server learns the 5 from Redis within a few exchanges (100 ms)
ok(wait_until(\&sync_seen, 5), 'the first server\'s counts reached Redis');
# a key new to a server learns the fleet's count after its first session
# there (docs/redis.md): admitted, then refused once an exchange ran
is(RLStream::tcp($p{1}{sync}, from => '127.0.0.7'), 'ok', 'the other server admits the key\'s first session there');
# (an exchange every 100 ms; a loaded machine may take longer to run one)
ok(RLTest::wait_until(sub { RLStream::tcp($p{1}{sync}, from => '127.0.0.7') eq '' }, 10),
   'then refuses it: the fleet\'s 6 reached it through Redis');

sub sync_seen {
    my $keys = $redis->cmd('KEYS', 'y:*');
    return ref $keys && @$keys;
}

$_->stop for @fleet;
done_testing();
