#!/usr/bin/perl
# Redis Cluster whose masters name themselves by host name
# (cluster-preferred-endpoint-type hostname, as managed services with TLS
# do): MOVED and ASK give a name, which each worker resolves with the http
# block's resolver (a DNS server of the test's) and follows.  Limits are
# exact across the masters; nginx's resolver asks once a name while its
# answer is valid; a name that moves is followed at the next connection
# there; without a resolver, or for a name that does not
# resolve, that master's keys are decided by on_redis_error and the error
# log says why.  Over TLS, a server reached by name is checked against its
# own name, or against redis_tls_name when that is given.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;
use RLRedis;
use RLDNS;
use RLCerts;

my @names = map { "node$_.rl.test" } 1 .. 3;
my $dns = RLDNS->new(map { $_ => '127.0.0.1' } @names)->start;
my $partial = RLDNS->new(map { $_ => '127.0.0.1' } @names[0, 1])->start;   # knows no node3

# three masters, each announcing its name; the test's own commands go to
# their ports
sub cluster {
    my (%opt) = @_;
    return RLRedis->cluster(sub {
        my ($i) = @_;
        +{ ($opt{tls} ? (tls => $opt{tls}->($i)) : ()),
          args => [ '--cluster-announce-hostname', $names[ $i - 1 ], '--cluster-preferred-endpoint-type', 'hostname',
                    ($opt{tls} ? ('--tls-cluster', 'yes') : ()) ] }
    });
}

my @nodes = cluster();
my $seed = $nodes[0]->port;
like($nodes[0]->cmd('GET', 'k') // '', qr/MOVED \d+ node2\.rl\.test:\d+/,
     'the cluster redirects by host name');

sub nginx {
    my ($resolver, %opt) = @_;
    my $t = RLTest->new();
    $t->start(<<"EOF2", workers => 2);
$resolver
log_format rl '\$uri \$status \$http_x_key \$ratelimit_decided_by';
access_log %%PREFIX%%/rl.log rl;
ratelimit_zone cl 1m redis=127.0.0.1:$opt{seed} redis_cluster=on redis_timeout=5s $opt{zone};
server {
    listen 127.0.0.1:%%PORT%% reuseport;
    location /one/ {
        ratelimit zone=cl key=\$http_x_key limit=3 period=1h;
        alias %%PREFIX%%/html/;
    }
    location = /stats { ratelimit_stats; }
}
EOF2
    return $t;
}

# --- two servers, resolving with valid=60s ---
{
    my @fleet = map { nginx("resolver 127.0.0.1:${\ $dns->port} valid=60s ipv6=off;", seed => $seed, zone => '') } 1 .. 2;
    my ($exact, @sizes) = RLRedis::three_of_five(\@fleet, \@nodes, '/one/index.html', 'key');
    ok($exact, '60 keys over two servers: exactly 3 of 5 pass for each');
    is(scalar(grep { $_ > 5 } @sizes), 3, "the keys are spread over the three masters, reached by name (@sizes)");
    my $fallback = 0;
    $fallback += () = $_->file('rl.log') =~ / fallback\S*$/mg for @fleet;
    is($fallback, 0, 'every request decided in Redis');
    my $errors = 0;
    $errors += $_->zone_stats('cl')->{redis}{errors} for @fleet;
    is($errors, 0, 'no Redis error');
    my @asked = map { $dns->asked($_) } @names;
    ok($asked[1] >= 1 && $asked[2] >= 1, "the names were resolved (@asked queries for node1..3)");
    # a worker asks for a name when it first connects there; its other
    # connections there are answered from its resolver's cache (valid=60s):
    # at most a query a name a worker
    ok($asked[1] <= 4 && $asked[2] <= 4, "at most one query a name a worker (@asked for 2 servers of 2 workers)");
    is(join('', map { $_->error_log =~ /ratelimit: redis/ ? $_->error_log : '' } @fleet), '',
       'nothing logged about Redis');
    $_->stop for @fleet;
}

# --- a master's address changes: found at the next connection there ---
{
    my $t = nginx("resolver 127.0.0.1:${\ $dns->port} valid=1s ipv6=off;", seed => $seed, zone => 'on_redis_error=deny');
    my $get = sub { my $k = shift; $t->get('/one/index.html', { 'X-Key' => $k })->{status} };
    $get->("move-$_") for 1 .. 30;
    my $before = $dns->asked('node2.rl.test');
    ok($before >= 1, "node2's name resolved ($before queries)");
    # each round sends 10 new keys of node2's, so that every round goes to
    # the name that moves
    my $n = 0;
    my $round = sub {
        my ($prefix) = @_;
        my @keys;
        while (@keys < 10) {
            my $k = "$prefix-" . ++$n;
            push @keys, $k if (RLRedis::master_of(\@nodes, $k))[0] == $nodes[1];
        }
        $get->($_) for @keys;
        my %by = map { my @f = split; ($f[2], $f[3]) } grep { / $prefix-/ } split /\n/, $t->file('rl.log');
        return map { $by{$_} // 'none' } @keys;
    };
    $dns->set('node2.rl.test' => '127.0.0.3');   # nothing listens there
    $nodes[1]->cmd('CLIENT', 'KILL', 'TYPE', 'normal');
    sleep 2.2;                                   # past valid=1s, in whole seconds
    # (the port is Redis's at 127.0.0.1: refused only at the new address)
    my @by;
    ok(RLTest::wait_until(sub {
        @by = $round->('after');
        (grep { $_ eq 'fallback_deny' } @by) && $t->error_log =~ /\(111: Connection refused\)/;
    }, 15), "the name moved to an address with no Redis: nginx connected there, its keys fall back (@by)");
    $t->log_like(qr/ratelimit: redis node2\.rl\.test:\d+: \w+\(\) failed \(\d+: [^)]+\), \d+ requests decided by on_redis_error/,
                 'the error log names the server by its name');
    my $at_back = $dns->asked('node2.rl.test');
    ok($at_back > $before, "the move found by a new query ($before, then $at_back)");
    $dns->set('node2.rl.test' => '127.0.0.1');
    # a connection opens to the name's last address while the name is
    # resolved again: a worker refused at the new address comes back once
    # it has asked again (one that went on deciding at the old address,
    # reconnected there meanwhile, need not ask), within its backoff
    my $after;
    ok(RLTest::wait_until(sub {
        @by = $round->('back');
        $after = $dns->asked('node2.rl.test');
        !grep({ $_ ne 'redis' } @by) && $after > $at_back;
    }, 15), "moved back: its keys are decided in Redis again (@by), found by a new query ($at_back, then $after)");
    $t->stop;
}

# --- without a resolver: keys on the other masters fall back, said ---
{
    my $t = nginx('', seed => $seed, zone => 'on_redis_error=deny');
    my (%by, %status);
    for my $k (1 .. 30) {
        my $r = $t->get('/one/index.html', { 'X-Key' => "nores-$k" });
        $status{ $r->{status} }++;
    }
    my @by = map { (split)[3] } split /\n/, $t->file('rl.log');
    $by{$_}++ for @by;
    ok($by{redis} && $by{fallback_deny}, "the seed's keys in Redis ($by{redis}), the others denied by on_redis_error=deny ("
       . ($by{fallback_deny} // 0) . ')');
    $t->log_like(qr/ratelimit: redis node[23]\.rl\.test:\d+: a host name, and no resolver in the http block to resolve it/,
                 'the error log says there is no resolver');
    $t->stop;
}

# --- a name the resolver does not know ---
{
    my $t = nginx("resolver 127.0.0.1:${\ $partial->port} ipv6=off;", seed => $seed, zone => 'on_redis_error=deny');
    my %by;
    for my $k (1 .. 30) {
        $t->get('/one/index.html', { 'X-Key' => "partial-$k" });
    }
    $by{ (split)[3] }++ for split /\n/, $t->file('rl.log');
    ok($by{redis} && $by{fallback_deny}, "node1 and node2's keys in Redis ($by{redis}), node3's denied ("
       . ($by{fallback_deny} // 0) . ')');
    $t->log_like(qr/ratelimit: redis node3\.rl\.test:\d+: cannot resolve "node3\.rl\.test": Host not found/,
                 'the error log names the name and what the resolver said');
    unlike($t->error_log, qr/redis node[12]\.rl\.test/, 'nothing of the names that resolve');
    $t->stop;
}
$_->stop for @nodes;

# --- over TLS: each master's certificate names only itself (the first
# also 127.0.0.1, the address of redis=) ---
SKIP: {
    my $certs = RLCerts::make();
    skip 'no openssl', 4 unless $certs;
    skip RLRedis::tls_missing(), 4 if RLRedis::tls_missing();
    skip RLTest::ssl_missing(), 4 if RLTest::ssl_missing();
    my @own = map { RLCerts::server($certs, "node$_", "DNS:$names[$_ - 1]" . ($_ == 1 ? ',IP:127.0.0.1' : '')) } 1 .. 3;
    my @tls = cluster(tls => sub { $own[ $_[0] - 1 ] });
    my $tseed = $tls[0]->tls_port;
    my $ca = "redis_tls=on redis_tls_ca=$certs->{ca}";

    my $t = nginx("resolver 127.0.0.1:${\ $dns->port} ipv6=off;", seed => $tseed, zone => "$ca on_redis_error=deny");
    my @s = map { $t->get('/one/index.html', { 'X-Key' => "tls-$_" })->{status} } 1 .. 30;
    is(scalar(grep { $_ != 200 } @s), 0, 'TLS: 30 keys over the three masters, each checked against its own name');
    is($t->zone_stats('cl')->{redis}{errors}, 0, 'TLS: no Redis error');
    $t->stop;

    $t = nginx("resolver 127.0.0.1:${\ $dns->port} ipv6=off;", seed => $tseed,
               zone => "$ca redis_tls_name=node1.rl.test on_redis_error=deny");
    @s = map { $t->get('/one/index.html', { 'X-Key' => "tls-$_" })->{status} } 1 .. 30;
    ok((grep { $_ == 200 } @s) && (grep { $_ == 429 } @s), 'TLS, redis_tls_name given: node1 serves, the others fail the check');
    $t->log_like(qr/redis node[23]\.rl\.test:\d+: TLS: the server's certificate does not name "node1\.rl\.test" \(redis_tls_name\)/,
                 'TLS: the log names the name the certificate lacks');
    $t->stop;
    $_->stop for @tls;
}

done_testing();
