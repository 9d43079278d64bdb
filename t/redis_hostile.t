#!/usr/bin/perl
# Redis replies are input, not truth: a fake Redis (t/lib/RLFakeRedis.pm)
# answers the script with hostile replies (numbers far past what the rule can
# produce, negative ones, wrong types, nested arrays, a 1 MB bulk string, an
# error with a newline, a redirection and NOSCRIPT where they cannot be
# followed, a function never found however often the library is sent,
# FCALL unknown and the script too, bytes that are not RESP, a reply one byte a write, a reply that
# never ends) and AUTH and SELECT with wrong answers.  Every request gets its
# zone's on_redis_error answer (local, allow, deny) within redis_timeout, the
# worker never dies, the key API answers 409, and the error log holds only
# whole lines, the reply escaped and cut, one line a second for a zone with
# the rest counted.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest qw(json_of);
use RLFakeRedis;

my $fake = RLFakeRedis->new;
my $fport = $fake->port;
my $timeout = 2;   # redis_timeout, s: a reply one byte a write takes ~0.1 s

my $t = RLTest->new();
my $zones = join "\n", map {
    my ($zone, $extra) = @$_;
    "ratelimit_zone $zone 1m redis=127.0.0.1:$fport redis_timeout=${timeout}s $extra;"
} [ flocal => 'on_redis_error=local' ], [ fallow => 'on_redis_error=allow' ], [ fdeny => 'on_redis_error=deny' ],
  [ fesc => '' ], [ ffold => 'on_redis_error=allow' ], [ fauth => 'redis_password=pw' ], [ fdb => 'redis_db=2' ];
my $locations = join "\n", map {
    "    location /$_/ { ratelimit zone=f$_ key=\$http_x_key limit=2 period=1h; alias %%PREFIX%%/html/; }"
} qw(local allow deny esc fold auth db);
$t->start(<<"EOF");
$zones
server {
    listen 127.0.0.1:%%PORT%%;
    add_header X-Decided \$ratelimit_decided_by always;
$locations
    location /api/ { ratelimit_api write=on; }
    location = /stats { ratelimit_stats; }
}
EOF
my ($worker) = $t->worker_pids;

# RESP for the script's answer to the request of one rule, from {request,
# then the rule's first 8}: the script's clock after the request's answer,
# then the rule's ban (none), the head's t after its commit (half an hour
# on, when it commits), the cost reserved (1) and no ban started
my $clock = 1767225600000;
sub answer {
    my ($all, $allowed, @rest) = @_;
    my @v = ($all, $clock, $allowed, @rest, 0, $all == 1 && $allowed == 1 ? $clock + 1800000 : 0, 1, 0);
    return join '', '*', scalar(@v), "\r\n", map { ":$_\r\n" } @v;
}

# limit=2 per hour, one request of a fresh key: remaining 1, reset 30 min
my $ok = answer(1, 1, 0, 1, 1800000, 0, 0, 3600000, 1800000);

my $n = 0;
sub hit {
    my ($where) = @_;
    my $start = time;
    my $r = $t->get("/$where/index.html", { 'X-Key' => 'k' . ++$n });
    return ($r->{status}, $r->{headers}{'x-decided'} // '-', time - $start);
}

# the zone's connections answering again: a request decided in Redis
sub up {
    my ($where) = @_;
    $fake->reply($ok);
    return RLTest::wait_until(sub { (hit($where))[1] eq 'redis' }, 10);
}

my %expect = (local => '200 fallback_local', allow => '200 fallback_allow', deny => '429 fallback_deny');

ok(up($_), "the fake answers well: $_ decided in Redis") for qw(local allow deny);

my @hostile = (
    [ 'a reset of 2^62 ms', answer(1, 1, 0, 1, '4611686018427387904', 0, 0, 3600000, 1800000) ],
    [ 'a Retry-After of 2^63 - 1 ms', answer(0, 0, 0, 0, 3600000, '9223372036854775807', 0, 3600000, 0) ],
    [ 'a Retry-After one past what the rule can produce', answer(0, 0, 0, 0, 3600000, 3660001, 0, 3600000, 0) ],
    [ 'a delay of 2^62 ms', answer(1, 1, 0, 1, 1800000, 0, '4611686018427387904', 3600000, 1800000) ],
    [ 'a negative remaining', answer(1, 1, 0, -5, 1800000, 0, 0, 3600000, 1800000) ],
    [ 'a remaining above the limit', answer(1, 1, 0, 3, 1800000, 0, 0, 3600000, 1800000) ],
    [ 'allowed, and no rule allowing', answer(1, 0, 0, 0, 3600000, 1800000, 0, 3600000, 1800000) ],
    [ 'a number past 64 bits', "*14\r\n:1\r\n:$clock\r\n:1\r\n:0\r\n:99999999999999999999\r\n" ],
    [ 'a status reply', "+OK\r\n" ],
    [ 'an integer', ":1\r\n" ],
    [ 'a bulk string', "\$5\r\nhello\r\n" ],
    [ 'nil', "\$-1\r\n" ],
    [ 'too few items', "*3\r\n:1\r\n:1\r\n:0\r\n" ],
    [ 'a nested array', "*14\r\n*1\r\n:1\r\n" . (":0\r\n" x 13) ],
    [ 'arrays nested 20 deep', ("*1\r\n" x 20) . ":1\r\n" ],
    [ 'a bulk string of 1 MB', "\$1048576\r\n" . ('x' x 1048576) . "\r\n" ],
    [ 'an error with a newline', "-ERR boom\nFORGED [notice] line\r\n" ],
    [ 'MOVED to a zone not in a cluster', "-MOVED 1 127.0.0.1:1\r\n" ],
    [ 'NOSCRIPT, even after EVAL', "-NOSCRIPT No matching script\r\n" ],
    [ 'a function never found, even after FUNCTION LOAD', "-ERR Function not found\r\n" ],
    [ 'FCALL unknown, and the script too', "-ERR unknown command 'FCALL', with args beginning with: \r\n" ],
    [ 'bytes that are not RESP', "HTTP/1.1 200 OK\r\n\r\n" ],
    [ 'out of range, one byte a write', answer(1, 1, 0, -1, 1800000, 0, 0, 3600000, 1800000), split => 1 ],
    [ 'a reply that never ends', $ok, stall => 1 ],
);

my $slowest = 0;
for my $case (@hostile) {
    my ($name, $bytes, %opt) = @$case;
    for my $mode (qw(local allow deny)) {
        up($mode) or BAIL_OUT("the fake does not answer $mode");
        my $errors = stats("f$mode")->{errors} + stats("f$mode")->{timeouts};
        $fake->reply($bytes, %opt);
        my ($status, $by, $took) = hit($mode);
        is("$status $by", $expect{$mode}, "$name: on_redis_error=$mode answers");
        cmp_ok(stats("f$mode")->{errors} + stats("f$mode")->{timeouts}, '>', $errors, "$name: counted ($mode)");
        $slowest = $took if $took > $slowest;
    }
}
cmp_ok($slowest, '<', $timeout + 1, "no request waited past redis_timeout (slowest ${slowest}s)");
like($t->error_log, qr/\[warn\] .*ratelimit: redis 127\.0\.0\.1:$fport: reset_ms of rule "gcra_2_1h" is 4611686018427387904: it can only be 0 to 3660000: "\*14\\x0d\\x0a:1/,
     'the first refused reply in a zone: why, and the reply escaped');

# a reply one byte a write is read whole: decided in Redis
$fake->reply($ok, split => 1);
is((hit('local'))[1], 'redis', 'a good reply one byte a write: decided in Redis');

# AUTH and SELECT answered with something else than +OK
$fake->reply($ok);
$fake->reply_to('AUTH', ":1\r\n");
$fake->reply_to('SELECT', "\$2\r\nOK\r\n");
my @auth = hit('auth');
is("$auth[0] $auth[1]", '200 fallback_local', 'AUTH answered ":1": refused, decided locally');
my @db = hit('db');
is("$db[0] $db[1]", '200 fallback_local', 'SELECT answered with a bulk string: refused, decided locally');
ok((grep { $_ eq 'AUTH' } $fake->commands) && (grep { $_ eq 'SELECT' } $fake->commands), 'the fake got AUTH and SELECT');

# the key API on a zone whose Redis answers out of shape: 409, never 5xx
$fake->reply("+OK\r\n");
for my $method (qw(GET DELETE)) {
    my $r = $t->request($method, '/api/zones/flocal/keys?key=x');
    is($r->{status}, 409, "key API, $method: 409");
    like((json_of($r) // {})->{error} // '', qr/zone "flocal" is decided in Redis, which did not answer/,
         "key API, $method: a JSON error saying why");
}

# an error reply's text: escaped, on one line, in the zone's first line
$fake->reply("-ERR boom\nFORGED [notice] line \"quoted\" \x01\r\n");
is((hit('esc'))[1], 'fallback_local', 'an error with a newline: decided locally');
$t->log_like(qr/\[error\] .*ratelimit: redis 127\.0\.0\.1:$fport: an error reply: "ERR boom\\x0aFORGED \[notice\] line \\x22quoted\\x22 \\x01"$/m,
     'the error text escaped, on its line');

# folding: a flood of refused replies in one zone, one line a second, the
# rest counted, every refusal accounted for
$fake->reply(answer(1, 1, 0, 1, 1800000, 0, 0, 3600000, '1099511627776'));
my $before = length $t->error_log;
my $start = time;
my $sent = 0;
while (time - $start < 2.5) {
    $sent++ if (hit('fold'))[1] eq 'fallback_allow';
}
my $elapsed = time - $start;
my $accounted = sub {
    return $t->folded(qr/ratelimit: redis 127\.0\.0\.1:$fport: available_ms of rule/,
                      qr/ratelimit: redis 127\.0\.0\.1:$fport: (\d+) more replies refused in zone "ffold"/, since => $before);
};
ok(RLTest::wait_until(sub { my ($l, $c) = $accounted->(); $l + $c == $sent }, 5),
   "a flood of $sent refused replies: every one logged or counted") or diag(join ' ', $accounted->());
my ($lines) = $accounted->();
cmp_ok($sent, '>', 10, "the flood ($sent in ${elapsed}s)");
cmp_ok($lines, '<=', int($elapsed) + 1, "at most one line a second for the zone ($lines in ${elapsed}s)");

# the error log: whole lines only, each bounded
my @log = split /\n/, $t->error_log;
my @forged = grep { !m{^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[} } @log;
ok(!@forged, 'no forged line in the error log') or diag(join "\n", @forged[0 .. ($#forged < 5 ? $#forged : 5)]);
my @long = grep { length > 1024 } @log;
ok(!@long, 'no line longer than 1 KB (replies shown cut)') or diag(substr($long[0], 0, 300));
like($t->error_log, qr/reply longer than 16384 bytes: "\$1048576\\x0d\\x0axxxx[x]*\.\.\.", /,
     'a 1 MB bulk string: the connection dropped, the start shown');
is_deeply([ $t->worker_pids ], [ $worker ], 'the worker never died');

$t->stop();
$fake->stop();
done_testing();

sub stats { $t->zone_stats($_[0])->{redis} }
