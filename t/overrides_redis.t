#!/usr/bin/perl
# Overrides on a Redis zone, with three nginx (two workers each) sharing one
# Redis: an override written through any server's key API applies on every
# server within 1 s (measured); a limit raised and cut with what the key
# spent carried over, as Redis keeps it; deny and allow decided without a
# script call; a refusal the zones remember lifted by an override that lifts
# it; an override removed and expired; a full hash refuses (409); and a
# redis_sync zone takes them from Redis as well.  Fields written into the
# hash by hand (a value of 27 KB, a limit beyond its rule's room, a line
# that does not read) are skipped, said once by each server, and stop no
# other; a write answers 200 only once its server applies it (409 where it
# cannot); Redis losing the hash is said at warn by every server.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest qw(json_of);
use RLRedis;

my $redis = RLRedis->new->start;
my $rport = $redis->port;

my @fleet = map { RLTest->new() } 1 .. 3;
my $rq_conf = <<"EOF";
    location /q/ { ratelimit zone=rq key=\$http_x_key limit=10 period=1h name=g; alias %%PREFIX%%/html/; }
    location /qc/ { ratelimit zone=rq key=\$http_x_key algorithm=concurrency limit=3 name=c; alias %%PREFIX%%/html/; }
EOF
$_->write_conf(<<"EOF", workers => 2) for @fleet;
ratelimit_zone rz 1m redis=127.0.0.1:$rport redis_timeout=5s overrides=8;
ratelimit_zone rq 1m redis=127.0.0.1:$rport redis_timeout=5s overrides=8;
ratelimit_zone rs 1m redis=127.0.0.1:$rport redis_sync=100ms overrides=8;
server {
    listen 127.0.0.1:%%PORT%%;
    add_header X-Decided \$ratelimit_decided_by always;
    add_header X-Override "[\$ratelimit_override]" always;
    location /g/ { ratelimit zone=rz key=\$http_x_key limit=10 period=1h name=g; alias %%PREFIX%%/html/; }
    location /w/ { ratelimit zone=rz key=\$http_x_key algorithm=fixed_window limit=10 period=1h name=w; alias %%PREFIX%%/html/; }
    location /s/ { ratelimit zone=rs key=\$http_x_key algorithm=fixed_window limit=2 period=1h name=s; alias %%PREFIX%%/html/; }
$rq_conf    location /rl/ { ratelimit_api write=on; }
    location = /stats { ratelimit_stats; }
}
EOF
$_->start for @fleet;
my ($one, $two, $three) = @fleet;

sub hit { my ($t, $path, $key) = @_; $t->get($path, { 'X-Key' => $key }) }
sub put {
    my ($t, $zone, $q, $body) = @_;
    return $t->request('PUT', "/rl/zones/$zone/overrides?$q", {}, $body);
}
sub del { my ($t, $zone, $q) = @_; $t->request('DELETE', "/rl/zones/$zone/overrides?$q") }

# admitted in a row, up to $n
sub admitted {
    my ($t, $path, $key, $n) = @_;
    my $ok = 0;
    for (1 .. $n) {
        last unless hit($t, $path, $key)->{status} == 200;
        $ok++;
    }
    return $ok;
}

# ---- a change on one server applies on the others within 1 s ----
{
    my $k = 'spread';
    is(admitted($two, '/g/', $k, 8), 8, 'a key spends 8 of 10 on server two');
    my $at = time;
    my $r = put($one, 'rz', "key=$k&rule=g", '{"limit":20}');
    is($r->{status}, 200, 'raised to 20 through server one') or diag($r->{content});
    my %seen;
    RLTest::wait_until(sub {
        for my $t ($two, $three) {
            $seen{ $t->port } //= time - $at if hit($t, '/g/', 'probe-' . $k)->{headers}{'x-override'} eq '[]'
                && $t->get_json("/rl/zones/rz/overrides?key=$k&rule=g")->{override};
        }
        return keys %seen == 2;
    }, 5);
    my ($slow) = sort { $b <=> $a } values %seen;
    ok(defined $slow && $slow < 1, sprintf('applied on both other servers within %.3f s (bound 1 s)', $slow // -1));
    diag(sprintf 'an override written on one server applied on the two others within %.3f s', $slow // -1);
    # spent 8 of 10: 12 more across the fleet, then refused
    my $ok = admitted($three, '/g/', $k, 6) + admitted($two, '/g/', $k, 10);
    is($ok, 12, 'spent 8, raised to 20: 12 more across servers three and two');
    my $last = hit($one, '/g/', $k);
    is($last->{status}, 429, 'the 21st refused on server one');
    is($last->{headers}{'x-ratelimit-limit'}, 20, 'stating the override\'s limit');
    is($last->{headers}{'x-override'}, '[limit g key]', '$ratelimit_override');
}

# ---- cut: carried over in Redis, Retry-After at the new pace ----
{
    my $k = 'cut';
    is(admitted($one, '/g/', $k, 8), 8, '8 of 10 spent');
    is(put($two, 'rz', "key=$k&rule=g", '{"limit":5}')->{status}, 200, 'cut to 5 an hour');
    RLTest::wait_until(sub { ($one->get_json("/rl/zones/rz/overrides?key=$k&rule=g")->{override}{limit} // 0) == 5 },
                       5);
    my $r = hit($one, '/g/', $k);
    is($r->{status}, 429, 'owes 8 of 5: refused');
    my $ra = $r->{headers}{'retry-after'};
    ok($ra >= 2875 && $ra <= 2880, "Retry-After $ra: 4 units at 720 s from the change (2880 s)");
    is(del($three, 'rz', "key=$k&rule=g")->{status}, 200, 'removed through server three');
    RLTest::wait_until(sub { $two->get("/rl/zones/rz/overrides?key=$k&rule=g")->{status} == 404 }, 5);
    is(admitted($two, '/g/', $k, 5), 2, 'back at 10 with 8 owed: 2 more');
}

# ---- deny and allow: no script call ----
{
    my $k = 'banned';
    is(put($one, 'rz', "key=$k", '{"action":"deny","expire":"1h"}')->{status}, 200, 'deny in every rule');
    RLTest::wait_until(sub { !grep { hit($_, '/w/', $k)->{status} != 429 } @fleet }, 5);
    $redis->cmd('CONFIG', 'RESETSTAT');
    my @r = map { hit($_, '/g/', $k) } @fleet;
    is(RLTest::statuses_of(@r), '429 429 429', 'refused on every server');
    ok($r[0]{headers}{'retry-after'} >= 3598, 'Retry-After: until the override ends');
    is($r[0]{headers}{'x-decided'}, 'local', 'decided here');
    # a request's call is an FCALL (its library is loaded by now); the
    # servers' polls of the overrides, every 250 ms, are EVALs
    my $info = $redis->cmd('INFO', 'commandstats');
    unlike($info, qr/cmdstat_(?:fcall|evalsha):calls=\d+/, 'with no script call');

    put($two, 'rz', 'key=partner&rule=g', '{"action":"allow"}');
    RLTest::wait_until(sub { hit($one, '/g/', 'partner')->{headers}{'x-override'} eq '[allow g key]' }, 5);
    my @s = map { hit($one, '/g/', 'partner')->{status} } 1 .. 15;
    is("@s", join(' ', ('200') x 15), 'an allowed key passes its rule uncounted');
}

# ---- a remembered refusal lifted ----
{
    my $k = 'remembered';
    is(admitted($one, '/g/', $k, 20), 10, 'spent 10 of 10');
    my @r = map { hit($one, '/g/', $k) } 1 .. 20;
    is(scalar(grep { $_->{headers}{'x-decided'} eq 'redis_cached' } @r) > 0, 1, 'its refusals remembered');
    is(put($two, 'rz', "key=$k&rule=g", '{"limit":15}')->{status}, 200, 'raised to 15 on another server');
    RLTest::wait_until(sub { hit($one, '/g/', $k)->{status} == 200 }, 5);
    is(admitted($one, '/g/', $k, 10), 4, 'the remembered refusal did not outlive it: 5 more of 15 in all');
}

# ---- expiry ----
{
    my $k = 'brief';
    is(put($one, 'rz', "key=$k&rule=w", '{"action":"deny","expire":"1500ms"}')->{status}, 200, 'deny for 1.5 s');
    my $until = time + 1.5;
    RLTest::wait_until(sub { hit($two, '/w/', $k)->{status} == 429 }, 5);
    sleep(0.05) while time < $until + 0.05;
    is(hit($two, '/w/', $k)->{status}, 200, 'expired: admitted at once');
}

# ---- a full hash ----
{
    my $n = () = @{ $one->get_json('/rl/zones/rz/overrides?count=100')->{overrides} };
    my $fail;
    for my $i (1 .. 10) {
        my $r = put($three, 'rz', "key=fill$i&rule=g", '{"limit":3}');
        $fail = $r, last if $r->{status} != 200;
    }
    ok($fail && $fail->{status} == 409, 'a full hash refuses with 409');
    like(json_of($fail)->{error} // '', qr/as many overrides as it has room for/, 'saying so');
}

# ---- redis_sync: taken from Redis too ----
{
    my $k = 'synced';
    is(put($one, 'rs', "key=$k&rule=s", '{"limit":4}')->{status}, 200, 'an override of a redis_sync zone');
    RLTest::wait_until(sub { hit($three, '/s/', 'p')->{status} && $three->get_json("/rl/zones/rs/overrides?key=$k&rule=s")->{override} }, 5);
    is(admitted($three, '/s/', $k, 10), 4, 'applied on another server: 4 of 4');
}

# ---- fields written by hand: each checked, a bad one skipped and said once

# how many lines of a server's error log match
sub said { my ($t, $re) = @_; return scalar(() = $t->error_log =~ /$re/g) }

my $hash;
{
    is(put($one, 'rq', 'key=rq-probe&rule=g', '{"action":"deny"}')->{status}, 200, 'an override of zone rq');
    ($hash) = grep { $redis->cmd('TYPE', $_) eq 'hash' && $redis->cmd('HEXISTS', $_, 'g key rq-probe') == 1 }
        @{ $redis->cmd('KEYS', '*') };
    ok($hash, 'its hash in Redis');
    $redis->cmd('HSET', $hash, 'g key big', 'g key big deny 0 0 0 0 0 ' . ('1' x 27000));
    $redis->cmd('HSET', $hash, 'c key hw', 'c key hw limit 1 4000 0 0 0 0');
    $redis->cmd('HSET', $hash, 'g key junk', 'garbage');
    $redis->cmd('HSET', $hash, 'g key typed', 'g key typed deny 0 0 0 0 0 0');
    $redis->cmd('HINCRBY', $hash, '#v', 1);   # as a hand writer moves the version
    my $skipped = qr/ratelimit_zone "rq": 3 fields of the overrides' hash in Redis skipped/;
    ok(RLTest::wait_until(sub { !grep { said($_, $skipped) == 0 } @fleet }, 5), 'every server says the bad fields');
    is(join(' ', map { said($_, $skipped) } @fleet), '1 1 1', 'once each, both workers of a server together');
    like($one->error_log, qr/\(the first: field "[^"]+"[^)]*\)/, 'naming the first and why');
    like(join('', map { $_->error_log } @fleet), qr/field "c key hw": "limit": rule "c" keeps room for at most 3 a key|field "g key big" \(a value of 27\d\d\d bytes\): its value is longer than an override's line|field "g key junk" \(a value of 7 bytes\): it is not the field of its value/,
         'as the key API would refuse them');
    unlike(join('', map { $_->error_log } @fleet), qr/longer than 16384/, 'no reply over the bound');
    is(hit($two, '/q/', 'typed')->{headers}{'x-override'}, '[deny g key]', 'a good field written by hand applies');
    is($two->get('/rl/zones/rq/overrides?key=hw&rule=c')->{status}, 404, 'a concurrency limit of 4,000 where the room is 3 is not taken');

    # the rest applies, and a write's 200 means its server applies it
    my $r = put($one, 'rq', 'key=rq-after&rule=g', '{"action":"deny"}');
    is($r->{status}, 200, 'a deny written past the bad fields') or diag($r->{content});
    is(hit($one, '/q/', 'rq-after')->{headers}{'x-override'}, '[deny g key]', 'applied on its server when it answers 200');
    ok(RLTest::wait_until(sub { !grep { hit($_, '/q/', 'rq-after')->{headers}{'x-override'} ne '[deny g key]' } @fleet }, 2),
       'and on every server within a second');
    sleep 0.6;   # polls of the moved version, the same bad fields read again
    is(join(' ', map { said($_, $skipped) } @fleet), '1 1 1', 'not said again while they are the same');
}

# ---- a write its server cannot take: 409, never 200 ----
{
    my $four = RLTest->new();
    $four->start(<<"EOF", workers => 2);
ratelimit_zone rq 1m redis=127.0.0.1:$rport redis_timeout=5s overrides=1;
server {
    listen 127.0.0.1:%%PORT%%;
$rq_conf
    location /rl/ { ratelimit_api write=on; }
}
EOF
    # its copy has room for one of the hash's live overrides: a write of
    # another is in Redis, but not here
    my %status = map { $_ => put($four, 'rq', "key=$_&rule=g", '{"action":"deny","expire":"1h"}') } qw(rq-probe rq-after typed);
    is(join(' ', sort map { $_->{status} } values %status), '200 409 409',
       'of three writes, the one it holds answers 200, the others 409');
    my ($held) = grep { $status{$_}{status} == 200 } keys %status;
    is($four->get("/rl/zones/rq/overrides?key=$held&rule=g")->{status}, 200, 'the one answered 200 is held there');
    my ($refused) = grep { $status{$_}{status} == 409 } keys %status;
    like(json_of($status{$refused})->{error} // '', qr/the override was written in Redis, but this server could not take it/,
         'saying so');
    is($four->get("/rl/zones/rq/overrides?key=$refused&rule=g")->{status}, 404, 'and it is not held there');
    like($four->error_log, qr/overrides for want of room \(overrides=1\)/, 'its error log says why');
    $four->stop;
}

# ---- Redis loses the hash: every server says so ----
{
    $redis->cmd('FLUSHALL');
    my $lost = qr/\[warn\] [^\n]*ratelimit_zone "rq": Redis lost the overrides' hash this server held/;
    ok(RLTest::wait_until(sub { !grep { said($_, $lost) == 0 } @fleet }, 5), 'every server says at warn that Redis lost the hash');
    is(join(' ', map { said($_, $lost) } @fleet), '1 1 1', 'once');
    is(hit($three, '/q/', 'rq-after')->{headers}{'x-override'}, '[]', 'and applies what Redis holds: nothing');
}

$_->stop for @fleet;
done_testing();
