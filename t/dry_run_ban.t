#!/usr/bin/perl
# A dry run bans nobody: a ban= rule's refusals in a dry run are logged and
# counted (dry_run_bans) but store no ban, so that turning the dry run off
# (a reload) finds every key as its rate says, not banned for an hour it was
# never refused.  The same rule without the dry run bans, counted (bans).
# Local and Redis zones.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(sleep);
use RLTest;
use RLRedis;

my $redis = RLRedis->new->start;
my $rport = $redis->port;

my $t = RLTest->new();
my $conf = sub {
    my ($dry) = @_;
    return <<"EOF";
ratelimit_zone z 1m;
ratelimit_zone rz 1m redis=127.0.0.1:$rport redis_timeout=5s;

server {
    listen 127.0.0.1:%%PORT%%;
    ratelimit_dry_run $dry;
    add_header X-RL-Status \$ratelimit_status always;

    location /local {
        ratelimit zone=z key=\$http_x_k limit=1 period=1s ban=1h name=dban;
    }
    location /redis {
        ratelimit zone=rz key=\$http_x_k limit=1 period=1s ban=1h name=dban;
    }
    location /rl/ { ratelimit_api; ratelimit_dry_run off; }
    location = /stats { ratelimit_stats; ratelimit_dry_run off; }
}
EOF
};
$t->put_file('html/local', "ok\n");
$t->put_file('html/redis', "ok\n");
$t->start($conf->('on'));

for my $z (['local', 'z'], ['redis', 'rz']) {
    my ($path, $zone) = @$z;
    my @r = map { $t->get("/$path", { 'X-K' => 'A' }) } 1 .. 3;
    is(join(' ', map { $_->{status} } @r), '200 200 200', "$path: a dry run serves all three");
    is(join(' ', map { $_->{headers}{'x-rl-status'} } @r), 'PASSED REJECTED_DRY_RUN REJECTED_DRY_RUN',
       "$path: the second and third would be refused");
    my $s = $t->rule_stats($zone, 'dban');
    is($s->{dry_run_bans}, 2, "$path: each would-be refusal counted as a ban a dry run would start");
    is($s->{bans}, 0, "$path: no ban started");
    is($t->key_rule($zone, 'A', 'dban')->{banned_ms}, 0, "$path: the key API shows no ban");
}
$t->log_like(qr/would reject \(dry run\)/, 'the dry run\'s refusals are logged');

# the dry run off: the key is as its rate says (1 a second), never banned
$t->write_conf($conf->('off'));
$t->reload;
for my $z (['local', 'z'], ['redis', 'rz']) {
    is($t->key_rule($z->[1], 'A', 'dban')->{banned_ms}, 0, "$z->[0]: after the reload, the key is not banned");
}
sleep 1.2;
for my $z (['local', 'z'], ['redis', 'rz']) {
    my ($path, $zone) = @$z;
    # two at once: the rate admits one of them, the other is refused
    my @r = sort { $a->{status} <=> $b->{status} } $t->at_once(map { [ "/$path", 'X-K' => 'A' ] } 1 .. 2);
    is($r[0]{status}, 200, "$path: after the dry run, the key is served (no ban stored)");
    is($r[1]{status}, 429, "$path: its other request in the second is refused");
    is($r[1]{headers}{'retry-after'}, 3600, "$path: and that real refusal bans it: Retry-After 3600");
    my $s = $t->rule_stats($zone, 'dban');
    is($s->{bans}, 1, "$path: one ban started");
    is($s->{dry_run_bans}, 2, "$path: the dry run's count stays");
}

$t->stop;
done_testing();
