#!/usr/bin/perl
# redis_password and redis_db: AUTH and SELECT on every new connection, the
# keys in the chosen database; a wrong password is an error that falls back
# (and says so in the log), never a crash.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;
use RLRedis;

my $redis = RLRedis->new(args => [ '--requirepass', 's3cret' ])->start;
my $rport = $redis->port;

my $t = RLTest->new->start(<<"EOF2");
log_format rl '\$uri \$status \$ratelimit_decided_by';
access_log %%PREFIX%%/rl.log rl;
ratelimit_zone good 1m redis=127.0.0.1:$rport redis_password=s3cret redis_db=3 redis_prefix=app1:;
ratelimit_zone bad 1m redis=127.0.0.1:$rport redis_password=wrong;
server {
    listen 127.0.0.1:%%PORT%%;
    location /good/ { ratelimit zone=good key=\$http_x_key limit=2 period=1h; alias %%PREFIX%%/html/; }
    location /bad/  { ratelimit zone=bad key=\$http_x_key limit=2 period=1h; alias %%PREFIX%%/html/; }
}
EOF2

is($t->statuses('/good/index.html', 3, { 'X-Key' => 'k' }), '200 200 429', 'with the password: the limit holds');
$redis->auth('s3cret');
my $keys = $redis->db(3)->cmd('KEYS', '*');
is(scalar(@$keys), 1, 'one key, in database 3');
like($keys->[0] // '', qr/^app1:[0-9a-f]{32}$/, 'named with redis_prefix');
is_deeply($redis->db(0)->cmd('KEYS', '*'), [], 'nothing in database 0');

my $r = $t->get('/bad/index.html', { 'X-Key' => 'k' });
is($r->{status}, 200, 'a wrong password: the request still passes (on_redis_error=local)');
$t->log_like(qr{^/bad/index.html 200 fallback_local$}m, 'decided locally', file => 'rl.log');
like($t->error_log, qr/ratelimit: redis 127\.0\.0\.1:$rport: refused AUTH, SELECT or ASKING: "WRONGPASS/,
     'the log says Redis refused the password');

$t->stop();
done_testing();
