#!/usr/bin/perl
# A managed Redis's failover: redis= names the primary by host name
# ("localhost" here: the configuration is read with 127.0.0.1, and nginx's
# resolver asks the test's DNS server), its replica listens at 127.0.0.2
# on the same port.  The replica is promoted, the old primary made its
# replica, the name moved: nginx's connections to the old primary are
# answered READONLY, closed, and opened again to the name's new address.
# The key's state reached the new primary by replication: its limit holds
# across the failover, exactly.  Then the name stops resolving: the last
# address serves.  A DNS server that never answers delays no connection.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;
use RLRedis;
use RLDNS;
use IO::Socket::INET;

my $primary = RLRedis->new->start;
my $port = $primary->port;
my $replica = RLRedis->new(host => '127.0.0.2', port => $port, args => [ '--replicaof', '127.0.0.1', $port ])->start;
ok(RLTest::wait_until(sub { ($replica->cmd('INFO', 'replication') // '') =~ /master_link_status:up/ }, 10),
   'a primary at 127.0.0.1 and its replica at 127.0.0.2, on one port');
my $dns = RLDNS->new(localhost => '127.0.0.1')->start;

# nginx with $resolver, its zone's Redis redis=localhost, falling back
# with deny; the access log says who decided each request
sub nginx {
    my ($resolver) = @_;
    return RLTest->new->start(<<"EOF");
$resolver
log_format rl '\$status \$ratelimit_decided_by';
access_log %%PREFIX%%/rl.log rl;
ratelimit_zone z 1m redis=localhost:$port redis_timeout=2s on_redis_error=deny;
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        ratelimit zone=z key=\$http_x_key limit=10 period=1h;
        alias %%PREFIX%%/html/;
    }
}
EOF
}

# a DNS server that never answers: the first connection goes to the
# addresses the configuration was read with, at once (a wait for the
# answer would outlast redis_timeout and fall back)
{
    my $mute = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'udp') or die "udp: $!\n";
    my $m = nginx("resolver 127.0.0.1:${\ $mute->sockport} ipv6=off;");
    is($m->get('/index.html', { 'X-Key' => 'mute' })->{status}, 200, 'a resolver that never answers: admitted');
    ok(RLTest::wait_until(sub { $m->file('rl.log') =~ /^200 redis$/m }, 5), 'decided in Redis, not held for the name');
    $m->stop;
    $primary->cmd('FLUSHALL');
}

my $t = nginx("resolver 127.0.0.1:${\ $dns->port} valid=1s ipv6=off;");

# a request, and who decided it: its access-log line, written after its
# response went out
my $sent = 0;
sub get {
    my ($key) = @_;
    my $r = $t->get('/index.html', { 'X-Key' => $key // 'k' });
    $sent++;
    RLTest::wait_until(sub { (() = $t->file('rl.log') =~ /\n/g) >= $sent }, 5);
    return $r;
}
sub last_by { (split ' ', (split /\n/, $t->file('rl.log'))[-1] // '')[1] // '' }

my $admitted = 0;
for (1 .. 4) {
    my $r = get();
    $admitted++ if $r->{status} == 200;
}
is($admitted, 4, 'four admitted, decided in Redis');
is(last_by(), 'redis', 'by the primary');
# (the first connection opened to the address the configuration was read
# with while the name resolves: the DNS server hears of it meanwhile)
ok(RLTest::wait_until(sub { $dns->asked('localhost') >= 1 }, 5), 'redis= resolved with the http block\'s resolver');
ok(RLTest::wait_until(sub { @{ $replica->cmd('KEYS', '*') } > 0 }, 5), 'the key\'s state replicated');

# the failover: the replica promoted, the old primary its replica, the name
# moved
$replica->cmd('REPLICAOF', 'NO', 'ONE');
$primary->cmd('REPLICAOF', '127.0.0.2', $port);
$dns->set(localhost => '127.0.0.2');

my ($fallback, $by_redis, $refused) = (0, 0, 0);
RLTest::wait_until(sub {
    my $r = get();
    my $by = last_by();
    if ($by eq 'redis') {
        $by_redis++;
        $admitted++ if $r->{status} == 200;
        $refused++ if $r->{status} == 429;
    } else {
        $fallback++;
    }
    return $refused >= 3;
}, 20);
ok($fallback >= 1, "while the connections reach the old primary: $fallback requests decided by on_redis_error=deny");
$t->log_like(qr/ratelimit: redis localhost:$port: a replica \(READONLY\): the primary failed over/,
             'the READONLY reply closes the connection, said');
ok($by_redis >= 9, "then decided in Redis again ($by_redis requests), at the name's new address");
is($admitted, 10, 'exactly 10 admitted across the failover: the state followed by replication');
ok(@{ $replica->cmd('KEYS', '*') } > 0 && ($primary->cmd('INFO', 'replication') // '') =~ /role:slave/,
   'the new primary holds the key');

# the resolver fails (the name unknown now), the connections closed: the
# name's last address still serves
$dns->set(localhost => undef);
sleep 2.2;   # past valid=1s, in whole seconds
my $asked = $dns->asked('localhost');
$replica->cmd('CLIENT', 'KILL', 'TYPE', 'normal');
my @by;
RLTest::wait_until(sub {
    get('later');
    push @by, last_by();
    $by[-1] eq 'redis' && $dns->asked('localhost') > $asked;
}, 10);
is($by[-1], 'redis', "the resolver fails: decided in Redis at the name's last address (after @by)");
$t->log_like(qr/\[warn\].*ratelimit: redis localhost:$port: cannot resolve "localhost": Host not found, connecting to its last address/,
             'the warning says so');
$t->stop;

$replica->stop;
$primary->stop;
done_testing();
