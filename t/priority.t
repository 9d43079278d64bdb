#!/usr/bin/perl
# Priority classes through nginx, against a slow upstream that counts the
# requests it holds and when each starts: a class's share of the slots kept
# from the others (the lower class refused first, and told why), borrowing
# what no share keeps, the wait queue serving higher classes first and a
# class in arrival order, a value naming no class taken as the lowest or
# class_default=, $ratelimit_class and $ratelimit_reason, the log line;
# and what nginx -t refuses.  Decided from the upstream's order and counts,
# never from how fast the machine is.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest qw(statuses_of);
use RLSlowUpstream;

my $up = RLSlowUpstream->new->start;
my $uport = $up->port;

my $t = RLTest->new();
$t->write_conf(<<"EOF", workers => 1);
keepalive_requests 100000000;
ratelimit_zone p 4m;
upstream slow { server 127.0.0.1:$uport; }
proxy_http_version 1.1;
proxy_read_timeout 60s;
map \$http_x_class \$request_class {
    default \$http_x_class;
    ~^/health critical;
}

server {
    listen 127.0.0.1:%%PORT%%;
    add_header X-Class \$ratelimit_class always;
    add_header X-Reason \$ratelimit_reason always;
    add_header X-Status \$ratelimit_status always;

    location /shares/ {
        ratelimit zone=p key=\$http_x_key algorithm=concurrency limit=4
                  priority=\$request_class classes=critical:50%,best_effort name=shares;
        proxy_pass http://slow/hold/1500;
    }
    location /queue/ {
        ratelimit zone=p key=\$http_x_key algorithm=concurrency limit=1 max_wait=10s
                  priority=\$request_class classes=critical,standard,best_effort name=queue;
        proxy_pass http://slow/hold/1000;
    }
    location /default/ {
        ratelimit zone=p key=\$http_x_key algorithm=concurrency limit=4
                  priority=\$request_class classes=critical,standard,best_effort
                  class_default=standard name=default;
        proxy_pass http://slow/hold/0;
    }
    location /plain/ {
        ratelimit zone=p key=\$http_x_key algorithm=concurrency limit=4 name=plain;
        proxy_pass http://slow/hold/0;
    }
    location /rl/ { ratelimit_api; }
}
EOF
$t->start();

# ---- a share kept; the lower class refused first, and why ----

# best effort alone: 2 of the 4 slots, the other 2 kept for critical
my @r = $t->at_once({ gap => 0.05 }, map { [ '/shares/', 'X-Key' => 's', 'X-Class' => 'best_effort' ] } 1 .. 4);
is(statuses_of(@r), '200 200 429 429', 'best effort: 2 of 4 slots, the 2 kept for critical refused to it');
is($r[2]{headers}{'x-reason'}, 'share', '$ratelimit_reason: share');
is($r[2]{headers}{'x-class'}, 'best_effort', '$ratelimit_class: best_effort');
is($r[2]{headers}{'x-status'}, 'REJECTED', '$ratelimit_status as for any refusal');
is($r[0]{headers}{'x-class'}, 'best_effort', 'an admitted request shows its class');
is($r[0]{headers}{'x-reason'} // '', '', '... and no reason');
like($t->error_log, qr/rejected by rule "shares" in zone "p", key fingerprint [0-9a-f]+, class best_effort, reason share/,
     'the log line names the class and the reason');

# critical while best effort holds its 2: the 2 kept, then full
$up->reset_most;
@r = $t->at_once({ gap => 0.05 },
    (map { [ '/shares/', 'X-Key' => 'k', 'X-Class' => 'best_effort', 'X-Seq' => "be$_" ] } 1 .. 2),
    (map { [ '/shares/', 'X-Key' => 'k', 'X-Class' => 'critical', 'X-Seq' => "c$_" ] } 1 .. 3));
is(statuses_of(@r), '200 200 200 200 429', 'critical takes its 2 kept slots beside best effort\'s 2, the 5th refused');
is($r[4]{headers}{'x-reason'}, 'full', '... every slot held: reason full');
is($up->most, 4, 'the upstream never held more than the limit');

# the key API: a class's slots held, its requests waiting, its share kept
{
    my @bg = map { $t->open_request('/shares/', { 'X-Key' => 'api', 'X-Class' => 'best_effort' }) } 1 .. 2;
    RLTest::wait_until(sub { ($t->key_rule('p', 'api', 'shares')->{in_flight} // 0) >= 2 }, 10);
    my $k = $t->key_rule('p', 'api', 'shares');
    is(join(' ', map { "$_:$k->{classes}{$_}{in_flight}/$k->{classes}{$_}{waiting}/$k->{classes}{$_}{kept}" }
            qw(critical best_effort)),
       'critical:0/0/2 best_effort:2/0/0', 'key API: each class\'s in_flight/waiting/kept');
    close $_ for @bg;
    RLTest::wait_until(sub { ($t->key_rule('p', 'api', 'shares')->{in_flight} // 1) == 0 }, 10);
}

# critical alone borrows every slot: no share keeps any for best effort
@r = $t->at_once({ gap => 0.05 }, map { [ '/shares/', 'X-Key' => 'c', 'X-Class' => 'critical' ] } 1 .. 5);
is(statuses_of(@r), '200 200 200 200 429', 'critical alone borrows all 4 slots');

# a health check mapped to critical by its path's header
@r = $t->at_once({ gap => 0.05 },
    (map { [ '/shares/', 'X-Key' => 'h', 'X-Class' => 'best_effort' ] } 1 .. 2),
    [ '/shares/', 'X-Key' => 'h', 'X-Class' => '/health' ]);
is(statuses_of(@r), '200 200 200', 'a map\'s class: the health check takes a kept slot');
is($r[2]{headers}{'x-class'}, 'critical', '... as critical');

# ---- the queue: higher classes first, then by arrival ----

$up->reset_most;
@r = $t->at_once({ gap => 0.1 },
    [ '/queue/', 'X-Key' => 'q', 'X-Class' => 'standard', 'X-Seq' => 'q-first' ],
    [ '/queue/', 'X-Key' => 'q', 'X-Class' => 'best_effort', 'X-Seq' => 'q-be1' ],
    [ '/queue/', 'X-Key' => 'q', 'X-Class' => 'standard', 'X-Seq' => 'q-std1' ],
    [ '/queue/', 'X-Key' => 'q', 'X-Class' => 'best_effort', 'X-Seq' => 'q-be2' ],
    [ '/queue/', 'X-Key' => 'q', 'X-Class' => 'critical', 'X-Seq' => 'q-crit' ],
    [ '/queue/', 'X-Key' => 'q', 'X-Class' => 'standard', 'X-Seq' => 'q-std2' ]);
is(statuses_of(@r), '200 200 200 200 200 200', 'max_wait: all 6 served');
my %start = map { $_->[0] => $_->[2] } grep { $_->[1] eq 'start' } $up->events;
my @order = sort { $start{$a} <=> $start{$b} } grep { exists $start{$_} } qw(q-first q-be1 q-std1 q-be2 q-crit q-std2);
is("@order", 'q-first q-crit q-std1 q-std2 q-be1 q-be2', 'served by class, then in the order they came');
is($up->most, 1, 'one at a time at the upstream');

# ---- a value naming no class ----

@r = $t->at_once(map { [ '/default/', 'X-Key' => 'd', 'X-Class' => $_ ] } 'bogus', '', 'critical');
is(join(' ', map { $_->{headers}{'x-class'} } @r), 'standard standard critical',
   'unknown and empty values are class_default=');
@r = $t->at_once([ '/queue/', 'X-Key' => 'u', 'X-Class' => 'CRITICAL' ]);
is($r[0]{headers}{'x-class'}, 'best_effort', 'without class_default=, the lowest class (names are exact)');
@r = $t->at_once([ '/plain/', 'X-Key' => 'p' ]);
is($r[0]{headers}{'x-class'} // '', '', 'a rule without priority= has no class');

$t->stop();

# ---- nginx -t ----

my $zone = "ratelimit_zone z 1m;\n";
$t->conf_refused($zone . RLTest::one_location('ratelimit zone=z key=$uri algorithm=concurrency limit=4 '
                                              . 'priority=$http_x_class classes=a:70%,b:40%;'),
                 qr/"ratelimit" directive: invalid "classes=a:70%,b:40%": the shares add up to 110%/,
                 'shares over 100%');
$t->conf_refused($zone . RLTest::one_location('ratelimit zone=z key=$uri algorithm=concurrency limit=4 '
                                              . 'priority=$http_x_class classes=a,b class_default=c;'),
                 qr/invalid "class_default=c": expected a class of classes=: a, b/, 'class_default= of no class');
$t->conf_refused($zone . RLTest::one_location('ratelimit zone=z key=$uri limit=4 '
                                              . 'priority=$http_x_class classes=a,b;'),
                 qr/"priority=" does not apply to algorithm=gcra: priority is for concurrency and adaptive/,
                 'priority= with a rate');
$t->conf_refused($zone . RLTest::one_location('ratelimit zone=z key=$uri algorithm=concurrency limit=4 '
                                              . 'priority=$http_x_class;'),
                 qr/missing "classes=" for priority=/, 'priority= without classes=');
$t->conf_refused("ratelimit_zone z 1m redis=127.0.0.1:1;\n"
                 . RLTest::one_location('ratelimit zone=z key=$uri algorithm=concurrency limit=4 '
                                        . 'priority=$http_x_class classes=a,b;'),
                 qr/"priority=" does not apply in a Redis zone/, 'priority= in a Redis zone');
my ($rc, $out) = $t->test_conf($zone . RLTest::one_location('ratelimit zone=z key=$uri algorithm=adaptive limit=100 '
                                                             . 'priority=$http_x_class classes=a:10%,b;'));
is($rc, 0, 'algorithm=adaptive takes priority=') or diag $out;

done_testing();
