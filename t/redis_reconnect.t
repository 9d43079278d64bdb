#!/usr/bin/perl
# How soon Redis is used again once it answers: every connection to it is
# opened again after a back-off that doubles from 100 ms to 1 s, so a
# redis_sync zone's journal is in Redis, and an exact zone's requests are
# decided there, within about a second of its return (docs/redis.md: the
# back-off's second and an exchange's interval; the test allows a second
# more for a busy machine).  Twice, requests coming all along: Redis paused
# (SIGSTOP) for 4 s, and stopped for 6.5 s then started again (empty).  The
# error log never says a reconnection waits more than 1000 ms, and says a
# connection's failures once while they repeat, then their end.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use HTTP::Tiny;
use List::Util qw(max);
use Time::HiRes qw(time sleep);
use RLTest;
use RLRedis;

my $redis = RLRedis->new->start;
my $rport = $redis->port;
my $cap = 1;            # the back-off's cap, seconds
my $interval = 0.1;     # redis_sync=
my $margin = 1;         # for a busy machine

# the exchanged window (a day, aligned on the epoch) must not end during
# the test: units of a window over are not sent
my $to_end = 86400 - time % 86400;
if ($to_end < 120) {
    diag(sprintf('waiting %.0f s for the next day\'s window', $to_end + 1));
    sleep $to_end + 1;
}

my $t = RLTest->new->start(<<"EOF", workers => 2);
ratelimit_zone sy 1m redis=127.0.0.1:$rport redis_prefix=sy: redis_sync=100ms redis_timeout=500ms;
ratelimit_zone ex 1m redis=127.0.0.1:$rport redis_prefix=ex: redis_timeout=500ms on_redis_error=local;
server {
    listen 127.0.0.1:%%PORT%%;
    keepalive_requests 1000000;
    add_header X-Decided \$ratelimit_decided_by always;
    location /sy {
        ratelimit zone=sy key=\$http_x_key algorithm=fixed_window limit=1000000 period=1d name=w;
        alias %%PREFIX%%/html/index.html;
    }
    location /ex {
        ratelimit zone=ex key=\$http_x_key limit=1000000 period=1d name=g;
        alias %%PREFIX%%/html/index.html;
    }
    location = /stats { ratelimit_stats; }
}
EOF

# A keep-alive client sending a request every 20 ms to $path (key $key)
# until $until: when each was answered, its status, who decided it, and
# when it was sent.
sub loader {
    my ($path, $key, $until) = @_;
    return RLTest::spawn(sub {
        my $http = HTTP::Tiny->new(keep_alive => 1, timeout => 10);
        my @seen;
        while (time < $until) {
            my $sent = time;
            my $r = $http->get($t->url($path), { headers => { 'X-Key' => $key } });
            push @seen, [ time, $r->{status}, $r->{headers}{'x-decided'} // '-', $sent ];
            sleep 0.02;
        }
        return \@seen;
    });
}

# The units Redis holds of the zone sy's key (a window's counter).
sub held {
    my $n = 0;
    my $keys = $redis->cmd('KEYS', 'sy:s:*');
    $n += $redis->cmd('GET', $_) // 0 for ref $keys eq 'ARRAY' ? @$keys : ();
    return $n;
}

# Redis away for $away seconds ($how: pause, or stop) while requests
# come, then back: how long after its return the units of the requests
# admitted meanwhile were all in Redis, and the exact zone's first request
# was decided there.
sub outage {
    my ($how, $away) = @_;
    # no call of the zone sy in doubt: one answered after FLUSHALL would
    # add its units again (its marker gone with the rest)
    ok(RLTest::wait_until(sub { $t->zone_stats('sy')->{sync}{pending} == 0 }, 10),
       "$how: before it, no call of the zone in doubt");
    $redis->cmd('FLUSHALL');
    my $key = "k-$how";
    $how eq 'pause' ? $redis->pause : $redis->stop;
    my $off = time;
    my @load = (loader('/sy', $key, $off + $away), loader('/ex', 'e', $off + $away + 4));
    sleep $off + $away - time;
    my $returning = time;   # Redis may answer from here on: start() returns once it does
    $how eq 'pause' ? $redis->resume : $redis->start;
    my $back = time;
    # Redis's total, every 20 ms, for 4 s
    my @seen;
    while (time < $back + 4) {
        push @seen, [ time, held() ];
        sleep 0.02;
    }
    my ($sy, $ex) = map { ($_->result)[0] } @load;
    $sy = grep { $_->[1] == 200 } @$sy;
    my ($synced) = grep { $_->[1] == $sy } @seen;
    my ($decided) = grep { $_->[0] > $back && $_->[2] eq 'redis' } @$ex;
    # sent once Redis was away (a SIGSTOP has taken effect 0.1 s later),
    # answered before it was started again: Redis decided none of them
    my @fell = grep { $_->[3] > $off + 0.1 && $_->[0] < $returning } @$ex;
    ok(@fell && !grep({ $_->[2] ne 'fallback_local' } @fell), "$how: while Redis was away, decided locally")
        or diag(scalar(@fell) . ' requests, these not local (sent-answered s after Redis left): '
                . join ' ', map { sprintf('%.2f-%.2f %s %s', $_->[3] - $off, $_->[0] - $off, @$_[1, 2]) }
                grep { $_->[2] ne 'fallback_local' } @fell);
    ok($sy > 0 && defined $synced, "$how: the $sy units admitted meanwhile all in Redis");
    my $late = defined $synced ? $synced->[0] - $back : 99;
    ok($late <= $cap + $interval + $margin,
       sprintf('%s: in Redis %.2f s after its return (within the back-off\'s %d s and an interval)', $how, $late,
               $cap));
    $late = defined $decided ? $decided->[0] - $back : 99;
    ok($late <= $cap + $margin, sprintf('%s: an exact zone\'s request decided in Redis %.2f s after its return', $how,
                                        $late));
}

# connections up, the warm request's unit in Redis (outage() waits for
# its call's answer)
$t->get('/ex', { 'X-Key' => 'warm' });
$t->get('/sy', { 'X-Key' => 'warm' });
RLTest::wait_until(sub { $t->zone_stats('sy')->{sync}{units} > 0 }, 5);

outage('pause', 4);
outage('stop', 6.5);

my @waits = $t->error_log =~ /reconnecting in (\d+) ms/g;
ok(@waits > 0, scalar(@waits) . ' reconnections logged');
# (the back-off reaches its cap where the failures repeat long enough:
# an exchange's calls wait a second each, so the pause may end before)
ok(max(@waits) <= $cap * 1000, 'none waits more than the back-off\'s 1000 ms (the longest: ' . max(@waits) . ' ms)');

# while Redis was stopped each connection failed about once a second, and
# said so once: 2 zones x 2 workers x redis_pool=2 connections at most
my @refused = $t->error_log =~ /ratelimit: redis 127\.0\.0\.1:$rport: \w+\(\) failed \(111: Connection refused\)/g;
ok(@refused >= 1 && @refused <= 8, scalar(@refused) . ' lines of refused connections, one a connection at most');
unlike($t->error_log, qr/\[error\].*(connect|recv)\(\) (to 127\.0\.0\.1:$rport )?failed.*while/,
       'nginx\'s own line of each is not written');
like($t->error_log, qr/\[notice\].*ratelimit: redis 127\.0\.0\.1:$rport: answering again, after [2-9]\d* failures of a connection/,
     'a connection\'s first reply after them says how many failures it had');

$t->stop;
done_testing();
