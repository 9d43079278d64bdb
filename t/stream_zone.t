#!/usr/bin/perl
# A stream zone is a zone: the machinery HTTP zones have, through an http {}
# server's key API and stats, on stream {} zones:
#
#   * the key API reads a stream zone's key (its remaining budget);
#   * overrides set through the key API at run time: a range of addresses
#     denied, one address's limit raised; the next stream connection obeys;
#     a key reset lets its address in again;
#   * the stats, the key API and Prometheus mark stream zones
#     ("block":"stream", a block="stream" label), HTTP ones "block":"http"
#     (their Prometheus series with no block label);
#   * a client that leaves while its connection is delayed gives its
#     place back;
#   * state=: a restart keeps every key's state.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest qw(wait_until);
use RLStream;
use IO::Socket::INET;

my $up = RLStream::Upstream->new->start;
my $upp = $up->port;
my $t = RLTest->new;
my %p = map { $_ => RLTest::free_port() } qw(five over kept paced);

my $stream = <<"EOF";
    ratelimit_zone sz 1m;
    ratelimit_zone ov 1m overrides=16;
    ratelimit_zone kept 1m state=%%PREFIX%%/kept.state;

    server {
        listen 127.0.0.1:$p{five};
        ratelimit zone=sz limit=5 period=1m name=five;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{over};
        ratelimit zone=ov limit=5 period=1m name=over;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{paced};
        ratelimit zone=sz algorithm=leaky_bucket limit=1 period=1s max_delay=1500ms name=paced;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{kept};
        ratelimit zone=kept limit=5 period=1h name=kept;
        proxy_pass 127.0.0.1:$upp;
    }
EOF

my $http = <<'EOF';
ratelimit_zone hz 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location /stats { ratelimit_stats; }
    
    location /rl/ { ratelimit_api write=on; }
    location / { ratelimit zone=hz limit=100 period=1m name=h; return 204; }
}
EOF
my $main = RLStream::main($t, $stream);
$t->start($http, main => $main);

sub tcps {
    my ($port, $n, %opt) = @_;
    return join ' ', map { RLStream::tcp($port, %opt) || 'closed' } 1 .. $n;
}

# a client address as a $binary_remote_addr key, %-encoded
sub addr_key { join '', map { sprintf '%%%02X', $_ } split /\./, $_[0] }

# ---- the key API reads a stream zone's key -------------------------------------------

is(tcps($p{five}, 3, from => '127.0.0.2'), 'ok ok ok', '3 connections of 5');
my $k = $t->get_json('/rl/zones/sz/keys?key=' . addr_key('127.0.0.2') . '&rule=five');
is($k && $k->{rules}[0]{remaining}, 2, 'the key API reads the stream key: 2 remaining')
    or diag explain $k;
is(tcps($p{five}, 3, from => '127.0.0.2'), 'ok ok closed', 'the stream server agrees');
ok($t->get_json('/rl/zones/sz/keys?key=' . addr_key('127.0.0.2') . '&rule=five')->{rules}[0]{refused},
   'the key API says the key is refused now');
is($t->request('DELETE', '/rl/zones/sz/keys?key=' . addr_key('127.0.0.2'))->{status}, 200, 'a reset of the key');
is(tcps($p{five}, 1, from => '127.0.0.2'), 'ok', 'the reset key connects again');

# ---- overrides through the key API ---------------------------------------------------

is(tcps($p{over}, 1, from => '127.0.0.3'), 'ok', 'an address connects');
my $r = $t->request('PUT', '/rl/zones/ov/overrides?range=127.0.0.3/32', {}, '{"action":"deny","expire":"10m"}');
is($r->{status}, 200, 'a range denied at run time in a stream zone') or diag $r->{content};
is(tcps($p{over}, 1, from => '127.0.0.3'), 'closed', 'the next connection of the range is closed');
is(tcps($p{over}, 1, from => '127.0.0.4'), 'ok', 'an address outside the range connects');
$r = $t->request('PUT', '/rl/zones/ov/overrides?key=' . addr_key('127.0.0.5') . '&rule=over', {}, '{"limit":7}');
is($r->{status}, 200, 'a key\'s limit raised to 7') or diag $r->{content};
is(tcps($p{over}, 8, from => '127.0.0.5'), 'ok ok ok ok ok ok ok closed', 'the key has 7 connections, the 8th closed');
is($t->request('DELETE', '/rl/zones/ov/overrides?range=127.0.0.3/32')->{status}, 200, 'the range\'s override removed');
is(tcps($p{over}, 1, from => '127.0.0.3'), 'ok', 'the range connects again');

# ---- a client that leaves while delayed gives its place back ---------------------------

{
    # limit=1 period=1s max_delay=1500ms: the first connects at once, the
    # second is held a second; when it leaves, a third is held a second
    # (admitted), not two (refused)
    my $first = RLStream::tcp_open($p{paced}, from => '127.0.0.8');
    ok($first, 'paced: the first connects at once');
    my $second = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $p{paced}, LocalAddr => '127.0.0.8')
        or die "connect: $!\n";
    sleep 0.1;
    close $second;
    sleep 0.1;
    my $third = RLStream::tcp_open($p{paced}, from => '127.0.0.8', timeout => 3);
    ok($third, 'the second left while held: the third is held one period, and admitted');
    close $first;
    close $third if $third;
}

# ---- stream zones marked as such -----------------------------------------------------

my $stats = $t->stats;
is($stats->{zones}{sz}{block}, 'stream', 'the stats mark a stream zone: "block":"stream"');
is($stats->{zones}{hz}{block}, 'http', 'and an HTTP zone "block":"http"');
my $zones = $t->get_json('/rl/zones');
is($zones && $zones->{zones}{ov}{block}, 'stream', 'the key API marks a stream zone')
    or diag explain $zones;
my $metrics = $t->get("/stats?format=prometheus")->{content};
like($metrics, qr/^nginx_ratelimit_\w+\{[^}]*zone="sz"[^}]*block="stream"/m, 'Prometheus: block="stream" on a stream zone\'s series');
like($metrics, qr/^nginx_ratelimit_zone_keys\{zone="hz"\} \d+$/m, 'an HTTP zone\'s series carry no block label');

# ---- state=: a restart keeps every key's state ---------------------------------------

is(tcps($p{kept}, 3, from => '127.0.0.6'), 'ok ok ok', '3 of 5 before a restart');
$t->stop;
ok(-s $t->prefix . '/kept.state', 'the state file written as nginx stopped');
$t->start($http, main => $main);
is(tcps($p{kept}, 3, from => '127.0.0.6'), 'ok ok closed', 'after a restart, 2 more: the 3 were kept');
is(tcps($p{kept}, 1, from => '127.0.0.7'), 'ok', 'another address has its 5');

$t->stop;
done_testing();
